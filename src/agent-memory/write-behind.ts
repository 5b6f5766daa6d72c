// A model turn's KV reaches the pages after the turn has answered: the engine saves it (llama.cpp writes
// the whole context to do so) off the turn's path, and only the turn's rows are appended. Jobs of one
// context run one after the other; anything that reads or moves a context's pages waits for its jobs
// first (settled). A failed job leaves the pages behind the conversation, which the workflow's record of
// the turns' token ids (the tail) still rebuilds; it is reported, never thrown at a later caller.
export class WriteBehind {
  private readonly queues = new Map<string, Promise<void>>();

  constructor(private readonly onError: (contextId: string, err: unknown) => void) {}

  /** Runs `job` after the context's earlier jobs. */
  after(contextId: string, job: () => Promise<void>): void {
    const next = (this.queues.get(contextId) ?? Promise.resolve()).then(job).catch((err: unknown) => this.onError(contextId, err));
    this.queues.set(contextId, next);
    void next.then(() => {
      if (this.queues.get(contextId) === next) this.queues.delete(contextId);
    });
  }

  /** Resolves once every job of the context scheduled so far has run. */
  settled(contextId: string): Promise<void> {
    return this.queues.get(contextId) ?? Promise.resolve();
  }

  /** Resolves once every job of every context scheduled so far has run. */
  async allSettled(): Promise<void> {
    await Promise.all([...this.queues.values()]);
  }
}
