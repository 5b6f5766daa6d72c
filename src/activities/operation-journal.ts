// Idempotency under Temporal retries: every activity call carries an operation id chosen by the
// workflow, and the worker remembers the outcome of each id it applied, bound to what admitted it (the
// calling workflow run, the tenant and the exact token). A retry of an applied operation that presents
// the same binding gets the recorded result instead of applying it again; a retry that arrives while the
// first attempt still runs waits for it. A call with the same ids but another binding finds nothing:
// operation ids are predictable (`<agentId>:<n>`), so the ids alone prove nothing. Failed operations are
// forgotten: the tier layer changes nothing when a call fails, so trying again is safe.

/** What admitted an operation. Every field must match for a retry to be answered from the record. */
export interface Admission {
  workflowId: string;
  runId: string;
  tenant: string;
  /** SHA-256 of the presented token: the token itself is never kept. */
  tokenDigest: string;
}

interface Entry {
  admission: Admission;
  outcome: Promise<unknown>;
}

export class OperationJournal {
  /** Per context, operation id -> entry, oldest first; contexts themselves in least recently used order. */
  private readonly contexts = new Map<string, Map<string, Entry>>();

  constructor(
    /** Operations remembered per context: a workflow runs one at a time, so a few cover any retry. */
    private readonly perContext = 16,
    /** Contexts remembered, released ones included (a retried release must find its record). */
    private readonly maxContexts = 4096,
  ) {}

  /**
   * The recorded outcome of `operationId` if it was admitted exactly as `admission`; undefined otherwise
   * (never recorded, failed, or recorded for another caller: then the caller is admitted afresh).
   */
  recorded<T>(contextId: string, operationId: string, admission: Admission): Promise<T> | undefined {
    const entry = this.contexts.get(contextId)?.get(operationId);
    return entry && sameAdmission(entry.admission, admission) ? (entry.outcome as Promise<T>) : undefined;
  }

  /**
   * Applies the operation and records its outcome under `admission`, replacing any entry of the same id
   * recorded for another admission. Callers admit first; a concurrent retry with the same admission waits
   * for the running attempt.
   */
  run<T>(contextId: string, operationId: string, admission: Admission, apply: () => Promise<T>): Promise<T> {
    const running = this.recorded<T>(contextId, operationId, admission);
    if (running !== undefined) return running;
    const ops = this.opsOf(contextId);
    const outcome = apply();
    const entry: Entry = { admission, outcome };
    ops.delete(operationId); // re-inserted last: the newest entry is the last one evicted
    ops.set(operationId, entry);
    outcome.catch(() => {
      if (ops.get(operationId) === entry) ops.delete(operationId);
    });
    while (ops.size > this.perContext) ops.delete(ops.keys().next().value as string);
    return outcome;
  }

  /**
   * The context has ended: every entry of it goes but `kept` (the ending operation, whose retry must
   * still be answered). A context created again under the same id starts with no record of the old one.
   */
  end(contextId: string, kept: string): void {
    const ops = this.contexts.get(contextId);
    if (!ops) return;
    for (const operationId of [...ops.keys()]) if (operationId !== kept) ops.delete(operationId);
  }

  /** Whether any admission has `operationId` recorded for the context (tests and diagnostics). */
  has(contextId: string, operationId: string): boolean {
    return this.contexts.get(contextId)?.has(operationId) ?? false;
  }

  private opsOf(contextId: string): Map<string, Entry> {
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

function sameAdmission(a: Admission, b: Admission): boolean {
  return a.workflowId === b.workflowId && a.runId === b.runId && a.tenant === b.tenant && a.tokenDigest === b.tokenDigest;
}
