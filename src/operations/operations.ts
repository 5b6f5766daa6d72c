// Every operation an agent undergoes, in one table: its word is the same at every layer (the workflow's
// update, the activity, the action a worker admits), and the row says where its activity runs and which
// capability right it needs. Pure data with no imports, so the workflow bundle, the worker and the
// security layer read this one copy. Adding an operation starts here: docs/agents.md#adding-an-operation.

export interface OperationRow {
  /** A caller asks for it with the update of the same name; false: only the workflow does it (start, failover). */
  update: boolean;
  /**
   * Where its activity runs: the shared task queue (whichever worker takes it holds the context) or the
   * holder's; `workflow`: it has none, the workflow alone acts on it.
   */
  queue: 'placement' | 'holder' | 'workflow';
  /** The right a caller's token needs for it; `custody`: no caller's token, only the custodian's. */
  right: string;
  /**
   * The workflow does it on its own (start, timers, failover) with the agent's custodian token, whose only
   * right is `custody`: none of these reads, writes or ends the context's bytes.
   */
  custody: boolean;
  /** Also run as this local activity in the workflow task, when the worker running the task holds the context. */
  local?: string;
  /** Its success ends the context: a worker keeps only this operation's record, for its retries. */
  ends?: true;
  /**
   * Its success revokes the token that asked for it: a retry is admitted on the token alone (authentic,
   * current, the caller's, with the right), since the context's epoch and grant no longer accept it.
   */
  revokesPresenter?: true;
}

export const OPERATIONS = {
  /** Creates the empty context when the agent starts. */
  allocate: { update: false, queue: 'placement', right: 'turn', custody: true },
  /** Adopts the context from the cold tier on a new holder after the old one was lost. */
  recover: { update: false, queue: 'placement', right: 'resume', custody: true },
  /** Ends a context whose holder died with no durable copy to adopt (a release with no holder). */
  retire: { update: false, queue: 'placement', right: 'release', custody: false, ends: true, revokesPresenter: true },
  /** Appends a turn: a message through the worker's model, or a synthetic turn's token count. */
  turn: { update: true, queue: 'holder', right: 'turn', custody: false, local: 'turnIfHolder' },
  /** Brings the context back to the device, verified against the workflow's digest. */
  resume: { update: true, queue: 'holder', right: 'resume', custody: false, local: 'resumeIfHolder' },
  /** Moves the context off the device, to host memory or disk (also the idle timers' move). */
  suspend: { update: true, queue: 'holder', right: 'suspend', custody: true },
  /** A child context sharing the parent's blocks, copy-on-write, on the parent's holder. */
  fork: { update: true, queue: 'holder', right: 'fork', custody: false },
  /** Undoes a fork whose child workflow never started. */
  unfork: { update: false, queue: 'holder', right: 'fork', custody: false },
  /** Keeps the context on its tier: pinning decides where the context lives, as suspending does. */
  pin: { update: true, queue: 'holder', right: 'suspend', custody: true },
  unpin: { update: true, queue: 'holder', right: 'suspend', custody: false },
  /** Frees the context and revokes its tokens. */
  release: { update: true, queue: 'holder', right: 'release', custody: false, ends: true, revokesPresenter: true },
  /**
   * Replaces the context's capability and revokes every older token, the owner's too: its own right, so
   * a narrow delegate (resume only) cannot revoke its owner.
   */
  renew: { update: true, queue: 'holder', right: 'renew', custody: false, revokesPresenter: true },
  /**
   * A GPU worker that stopped gracefully says it left, its contexts on disk: the agent's next call adopts
   * the context elsewhere at once. Sent by that worker, never by a caller: the workflow admits it with
   * the proof of its custodian token only (src/workflows/holder-left.ts).
   */
  holderLeft: { update: true, queue: 'workflow', right: 'custody', custody: true },
  /**
   * A planned wake-up: the owner's workflow says when the context is needed (the update, admitted with the
   * proof of the custodian token, as holderLeft), and the agent's workflow brings the context back ahead
   * of it with its custodian token (the activity: a resume that never evicts to make room). Moves bytes
   * within the worker only, like recover: no caller's right (src/workflows/wake-ups.ts).
   */
  wake: { update: true, queue: 'holder', right: 'custody', custody: true, local: 'wakeIfHolder' },
} as const satisfies Record<string, OperationRow>;

export type Operation = keyof typeof OPERATIONS;

/** The operations a caller asks for by update: each update's name is the operation's. */
export type UpdateOperation = { [K in Operation]: (typeof OPERATIONS)[K]['update'] extends true ? K : never }[Operation];

/** The rights a caller's token can hold: one per kind of operation a caller may ask for (see OPERATIONS' `right`). */
export type CallerRight = Exclude<(typeof OPERATIONS)[Operation]['right'], 'custody'>;

export const OPERATION_NAMES = Object.keys(OPERATIONS) as Operation[];

export function isOperation(value: unknown): value is Operation {
  return typeof value === 'string' && Object.hasOwn(OPERATIONS, value);
}
