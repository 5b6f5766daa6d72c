// Memory operations of one agent run one at a time, in arrival order: updates and timers interleave at
// every await, and two of them moving the same context at once would race on its tier and its digest.
// Deterministic (plain promises), so it is safe in workflow code.

export class OperationQueue {
  private tail: Promise<unknown> = Promise.resolve();
  private pending = 0;

  run<T>(operation: () => Promise<T>): Promise<T> {
    this.pending++;
    const result = this.tail.then(operation);
    const settled = result.then(
      () => this.pending--,
      () => this.pending--,
    );
    this.tail = settled;
    return result;
  }

  get idle(): boolean {
    return this.pending === 0;
  }
}
