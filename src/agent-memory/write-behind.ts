// A model turn's KV reaches the pages after the turn has answered: the engine saves it (llama.cpp writes
// the whole context to do so) off the turn's path, and only the turn's rows are appended. Jobs of one
// context run one after the other (one KeyedMutex queue per context); anything that reads or moves a
// context's pages waits for its jobs first (settled), which also starts at once a job still waiting out
// its pause (afterPause: work that can wait until an answer is on its way). A failed job leaves the pages
// behind the conversation, which the workflow's record of the turns' token ids (the tail) still rebuilds;
// it is reported, never thrown at a later caller.
import { KeyedMutex } from '../tiers/keyed-mutex';

export class WriteBehind {
  private readonly queues = new KeyedMutex();
  /** Per context, the starts of paused jobs not yet started. */
  private readonly paused = new Map<string, Set<() => void>>();

  constructor(private readonly onError: (contextId: string, err: unknown) => void) {}

  /** Runs `job` after the context's earlier jobs. */
  after(contextId: string, job: () => Promise<void>): void {
    void this.queues.run(contextId, job).catch((err: unknown) => this.onError(contextId, err));
  }

  /**
   * Runs `job` after the context's earlier jobs, `pauseMs` after now, or at once when something waits for
   * the context (settled): work that would otherwise compete for the CPU with the answer on its way out.
   */
  afterPause(contextId: string, pauseMs: number, job: () => Promise<void>): void {
    let start!: () => void;
    const started = new Promise<void>((resolve) => {
      start = resolve;
    });
    const timer = setTimeout(start, pauseMs);
    const starts = this.paused.get(contextId) ?? new Set<() => void>();
    starts.add(start);
    this.paused.set(contextId, starts);
    this.after(contextId, async () => {
      await started;
      clearTimeout(timer);
      starts.delete(start);
      if (starts.size === 0 && this.paused.get(contextId) === starts) this.paused.delete(contextId);
      await job();
    });
  }

  /** Resolves once every job of the context scheduled so far has run; paused ones start now. */
  settled(contextId: string): Promise<void> {
    this.startPaused(contextId);
    return this.queues.run(contextId, async () => undefined);
  }

  /** Resolves once no job of any context is left. */
  async allSettled(): Promise<void> {
    while (this.queues.lockedKeys > 0) {
      for (const contextId of [...this.paused.keys()]) this.startPaused(contextId);
      await this.queues.nextRelease();
    }
  }

  private startPaused(contextId: string): void {
    for (const start of this.paused.get(contextId) ?? []) start();
  }
}
