// A model turn's KV reaches the pages after the turn has answered: the engine saves it (llama.cpp writes
// the whole context to do so) off the turn's path, and only the turn's rows are appended. Jobs of one
// context run one after the other (one KeyedMutex queue per context); anything that reads or moves a
// context's pages waits for its jobs first (settled). A failed job leaves the pages behind the
// conversation, which the workflow's record of the turns' token ids (the tail) still rebuilds; it is
// reported, never thrown at a later caller.
import { KeyedMutex } from '../tiers/keyed-mutex';

export class WriteBehind {
  private readonly queues = new KeyedMutex();

  constructor(private readonly onError: (contextId: string, err: unknown) => void) {}

  /** Runs `job` after the context's earlier jobs. */
  after(contextId: string, job: () => Promise<void>): void {
    void this.queues.run(contextId, job).catch((err: unknown) => this.onError(contextId, err));
  }

  /** Resolves once every job of the context scheduled so far has run. */
  settled(contextId: string): Promise<void> {
    return this.queues.run(contextId, async () => undefined);
  }

  /** Resolves once no job of any context is left. */
  async allSettled(): Promise<void> {
    while (this.queues.lockedKeys > 0) await this.queues.nextRelease();
  }
}
