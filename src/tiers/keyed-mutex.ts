// One queue of async operations per key: operations on one context run one after another, so the
// allocator never sees two of them at once (it would answer BUSY), while different contexts proceed
// in parallel.
export class KeyedMutex {
  private readonly tails = new Map<string, Promise<unknown>>();

  isLocked(key: string): boolean {
    return this.tails.has(key);
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
    });
    return result;
  }
}
