// Idempotency under Temporal retries: every activity call carries an operation id chosen by the
// workflow, and the worker remembers the outcome of each id it applied. A retry of an applied
// operation gets the recorded result instead of applying it again; a retry that arrives while the first
// attempt still runs waits for it. Failed operations are forgotten: the tier layer changes nothing when
// a call fails, so trying again is safe.

export class OperationJournal {
  /** Per context, operation id -> outcome, oldest first; contexts themselves in least recently used order. */
  private readonly contexts = new Map<string, Map<string, Promise<unknown>>>();

  constructor(
    /** Operations remembered per context: a workflow runs one at a time, so a few cover any retry. */
    private readonly perContext = 16,
    /** Contexts remembered, released ones included (a retried release must find its record). */
    private readonly maxContexts = 4096,
  ) {}

  run<T>(contextId: string, operationId: string, apply: () => Promise<T>): Promise<T> {
    const ops = this.opsOf(contextId);
    const recorded = ops.get(operationId);
    if (recorded) return recorded as Promise<T>;
    const outcome = apply();
    ops.set(operationId, outcome);
    outcome.catch(() => {
      if (ops.get(operationId) === outcome) ops.delete(operationId);
    });
    while (ops.size > this.perContext) ops.delete(ops.keys().next().value as string);
    return outcome;
  }

  has(contextId: string, operationId: string): boolean {
    return this.contexts.get(contextId)?.has(operationId) ?? false;
  }

  private opsOf(contextId: string): Map<string, Promise<unknown>> {
    let ops = this.contexts.get(contextId);
    if (ops) {
      this.contexts.delete(contextId); // re-insert: most recently used last
    } else {
      ops = new Map();
    }
    this.contexts.set(contextId, ops);
    while (this.contexts.size > this.maxContexts) this.contexts.delete(this.contexts.keys().next().value as string);
    return ops;
  }
}
