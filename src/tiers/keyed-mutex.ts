// One queue of async operations per key: operations on one context run one after another, so the
// allocator never sees two of them at once (it would answer BUSY), while different contexts proceed
// in parallel.
export class KeyedMutex {
  private readonly tails = new Map<string, Promise<unknown>>();
  private releaseWaiters: Array<() => void> = [];

  isLocked(key: string): boolean {
    return this.tails.has(key);
  }

  /** Keys with an operation running or queued. */
  get lockedKeys(): number {
    return this.tails.size;
  }

  /** Resolves when the next operation, on any key, finishes. */
  nextRelease(): Promise<void> {
    return new Promise((resolve) => this.releaseWaiters.push(resolve));
  }

  run<T>(key: string, operation: () => Promise<T>): Promise<T> {
    const previous = this.tails.get(key) ?? Promise.resolve();
    const result = previous.then(operation, operation);
    const tail = result.then(
      () => undefined,
      () => undefined,
    );
    this.tails.set(key, tail);
    void tail.then(() => {
      if (this.tails.get(key) === tail) this.tails.delete(key);
      const waiters = this.releaseWaiters;
      this.releaseWaiters = [];
      for (const wake of waiters) wake();
    });
    return result;
  }
}
