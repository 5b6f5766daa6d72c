// The llama engine's hot copies: one llama sequence per kvfabric context, kept between calls, and at most
// one call on a context at a time. When every sequence is taken, the least recently used one whose KV
// kvfabric has saved goes first; one holding an unsaved turn only when nothing else can, since kvfabric's
// pages and the turn's token ids rebuild it. When every hot one is in a call, a caller waits for the first
// call to end. A call may answer before its tail (a reply's closing tokens) is evaluated: whatever comes
// next on that context (a call, a save, an eviction) waits for the tail, and is never refused for it.
import type { LlamaContext, LlamaContextSequence } from 'node-llama-cpp';

import { FabricError, isFabricError } from '../../fabric/errors';

export interface HotContext {
  sequence: LlamaContextSequence;
  lastUsed: number;
  /** Holds tokens whose KV kvfabric has not saved yet: evicted only when no other sequence can go. */
  unsaved: boolean;
}

export class HotSequences {
  private readonly hot = new Map<string, HotContext>();
  private readonly busy = new Set<string>();
  /** The tail of a call that has answered, per context: settles (never rejects) once it is evaluated or dropped. */
  private readonly tails = new Map<string, Promise<void>>();
  private useClock = 0;
  /** Who waits for a sequence while every hot one is in a call: woken when any call ends. */
  private readonly waiters: Array<() => void> = [];
  private closed = false;

  constructor(private readonly context: LlamaContext) {}

  /** `key`'s hot copy, if any. */
  of(key: string): HotContext | undefined {
    return this.hot.get(key);
  }

  /** BUSY while a call on `key` runs; INVALID_STATE once closed. */
  requireIdle(key: string): void {
    if (this.closed) throw new FabricError('INVALID_STATE', 'engine is closed');
    if (this.busy.has(key)) throw new FabricError('BUSY', `a call on ${key} is already running`);
  }

  /** Makes `sequence` the hot copy of `key`, most recently used. */
  touch(key: string, sequence: LlamaContextSequence, unsaved: boolean): void {
    this.hot.set(key, { sequence, lastUsed: ++this.useClock, unsaved });
  }

  /** Runs `work` as the only call on `key`; an error drops the hot copy, which may be half changed. */
  exclusive<T>(key: string, work: () => Promise<T>): Promise<T> {
    return this.answer(key, async () => ({ value: await work() }));
  }

  /**
   * Runs `work` as the only call on `key` and answers with its `value` before its `tail` runs: the tail
   * keeps the context from every other use until it ends, and a tail that fails drops the hot copy (the
   * pages and token ids rebuild it), as an error in `work` does.
   */
  async answer<T>(key: string, work: () => Promise<{ value: T; tail?: () => Promise<void> }>): Promise<T> {
    this.take(key);
    let tail: (() => Promise<void>) | undefined;
    try {
      await this.tails.get(key);
      const answered = await work();
      tail = answered.tail;
      return answered.value;
    } catch (err) {
      await this.release(key);
      throw isFabricError(err) ? err : new FabricError('UNAVAILABLE', `llama engine: ${(err as Error).message}`);
    } finally {
      if (tail) this.runTail(key, tail);
      this.callEnded(key);
    }
  }

  /** Runs `work` as the only call on `key`, leaving the hot copy whatever happens (a save reads it only). */
  async reading<T>(key: string, work: () => Promise<T>): Promise<T> {
    this.take(key);
    try {
      await this.tails.get(key);
      return await work();
    } finally {
      this.callEnded(key);
    }
  }

  /**
   * A free sequence of the llama context, evicting a hot one when all are taken: the least recently used
   * whose KV kvfabric has saved, else the least recently used. When every hot one is in a call, it waits
   * for the first call to end.
   */
  async free(): Promise<LlamaContextSequence> {
    while (this.context.sequencesLeft === 0) {
      if (this.closed) throw new FabricError('INVALID_STATE', 'engine is closed');
      const idle = [...this.hot.entries()]
        .filter(([key]) => !this.busy.has(key))
        .sort((a, b) => Number(a[1].unsaved) - Number(b[1].unsaved) || a[1].lastUsed - b[1].lastUsed)[0];
      if (idle) await this.release(idle[0]);
      else await new Promise<void>((wake) => this.waiters.push(wake));
    }
    return this.context.getSequence();
  }

  /** Lets go of `key`'s hot copy, if any, once its tail, if any, has ended. */
  async release(key: string): Promise<void> {
    await this.tails.get(key);
    const entry = this.hot.get(key);
    if (!entry) return;
    this.hot.delete(key);
    if (!entry.sequence.disposed) await entry.sequence.dispose();
  }

  /** Lets go of every hot copy; whoever waits for a sequence finds the engine closed. */
  async close(): Promise<void> {
    this.closed = true;
    for (const wake of this.waiters.splice(0)) wake();
    for (const key of [...this.hot.keys()]) await this.release(key);
  }

  /** Makes `key` the context of a call: BUSY while another call on it runs (a tail is waited for instead). */
  private take(key: string): void {
    this.requireIdle(key);
    this.busy.add(key);
  }

  /** Runs a call's tail; an eviction or the next call on `key` waits for it. */
  private runTail(key: string, tail: () => Promise<void>): void {
    const running = Promise.resolve()
      .then(tail)
      .catch(async () => {
        this.tails.delete(key);
        await this.release(key);
      })
      .finally(() => {
        if (this.tails.get(key) === running) this.tails.delete(key);
      });
    this.tails.set(key, running);
  }

  /** `key`'s call is over: it may be evicted again, and whoever waits for a sequence looks again. */
  private callEnded(key: string): void {
    this.busy.delete(key);
    for (const wake of this.waiters.splice(0)) wake();
  }
}
