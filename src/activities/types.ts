// The activities' contract with the workflow. Workflows import this file with `import type` only, so
// nothing native reaches the workflow bundle. No field ever carries KV bytes: only counts, digests and
// the task queue of the worker that holds a context.
import type { ModelShape } from '../fabric/types';
import type { ContextSnapshot } from '../agent-memory/context-snapshot';
import type { DigestState } from '../agent-memory/context-digest';
import type { ForkResult, ReleaseResult, RenewResult, ResumeResult, SuspendResult, TurnResult } from '../agent-memory/operation-results';
import type { TurnFields } from '../agent-memory/turn';

export type { DigestState } from '../agent-memory/context-digest';
export type { GenerationSettings } from '../engines/engine';
export type { TurnFields, TurnReply } from '../agent-memory/turn';
export type { ContextSnapshot } from '../agent-memory/context-snapshot';
/** What the operations give back, as AgentMemory returns them. */
export type { ForkResult, ReleaseResult, RenewResult, ResumeResult, SuspendResult, TurnResult } from '../agent-memory/operation-results';

export type { Tier } from '../fabric/tier';

/** Every call names the context (the agent id), its tenant, the caller's capability and an operation id. */
export interface ContextRequest {
  agentId: string;
  tenant: string;
  /** A signed capability (src/security); checked by the worker before anything else, never logged. */
  capability: string;
  /** Unique per call within the agent (the workflow's operation counter): a retry carries the same id. */
  operationId: string;
  /**
   * The revocation epoch the workflow last raised (its allocation's or fork's, then each renewal's; absent
   * on the allocation itself): a worker whose store holds a lower one refuses the call (INTEGRITY), as an
   * entry was deleted.
   */
  revokedBelow?: number;
}

/** A context and the worker-specific task queue of the worker that now holds it. */
export interface Placement extends ContextSnapshot {
  holder: string;
  /** The holder runs agent workflows too: a workflow task may run there and restore locally (LocalActivities). */
  holderRunsWorkflows?: boolean;
}

export interface AllocateRequest extends ContextRequest {
  shape: ModelShape;
  tokensPerBlock: number;
  /** Write an (empty) durable copy at once, so the context survives its worker from the start. */
  checkpoint: boolean;
}

/** A new context: its placement, the digest of its (empty) contents and the epoch below which its tokens are revoked. */
export interface Allocation extends Placement {
  digest: DigestState;
  revokedBelow: number;
}

export interface RecoverRequest extends ContextRequest {
  /** Which failover of the agent this is (1, 2, ...): the adopting worker claims the context with it. */
  epoch: number;
  /** The newest durable-copy version the workflow saw (ContextSnapshot.durableVersion): older manifests are refused. */
  minVersion: number;
}

/** A turn: a message for the worker's model or a synthetic turn's token count (the fields: TurnFields). */
export interface TurnRequest extends ContextRequest, TurnFields {}

/**
 * What the workflow records of a context's conversation: the digest of its pages, and the token ids after
 * them (turns whose KV had not reached the pages yet), which the worker saves or evaluates again.
 */
export interface ConversationRecord {
  /** The context must begin with exactly these bytes. */
  expected: DigestState;
  tail?: number[];
}

export interface ForkRequest extends ContextRequest, Partial<ConversationRecord> {
  childId: string;
  childCapability: string;
  /** The child's custodian token (minted with childCapability), checked here before the child workflow carries it. */
  childCustodian: string;
  checkpoint: boolean;
}

/** The context leaves the engine: its pages are first brought up to the whole conversation. */
export interface SuspendRequest extends ContextRequest, Partial<ConversationRecord> {
  tier: 'host' | 'disk';
}

/** The context may be longer than `expected` by a turn in flight, or by (part of) the tail. */
export interface ResumeRequest extends ContextRequest, ConversationRecord {}

/** A resume the workflow asks of its own worker, as a local activity: done there only if that worker is the holder. */
export interface LocalResumeRequest extends ResumeRequest {
  /** The holder the workflow recorded: the worker running the workflow task resumes only if it is this one. */
  holder: string;
}

/** A turn the workflow asks of its own worker, as a local activity: done there only if that worker is the holder. */
export interface LocalTurnRequest extends TurnRequest {
  /** The holder the workflow recorded: the worker running the workflow task turns only if it is this one. */
  holder: string;
}

export interface RenewRequest extends ContextRequest {
  /** The replacement capability; `capability` is the one it replaces. */
  next: string;
  /** The replacement's custodian token, which the workflow carries from then on. */
  nextCustodian: string;
}

/**
 * Run on the shared task queue: whichever worker takes the call holds the context afterwards. One
 * method per operation whose row in OPERATIONS (src/operations) says `queue: 'placement'`.
 */
export interface PlacementActivities {
  allocate(request: AllocateRequest): Promise<Allocation>;
  recover(request: RecoverRequest): Promise<Placement>;
  retire(request: ContextRequest): Promise<ReleaseResult>;
}

/**
 * Run as local activities by the worker that runs the agent workflow's task, in that task: no activity
 * task passes through the server. Each acts only when that worker holds the context, and otherwise
 * answers null: the workflow then calls the holder through its queue as usual.
 */
export interface LocalActivities {
  /** A resume from memory (device or host tier) when this worker holds the context. */
  resumeIfHolder(request: LocalResumeRequest): Promise<ResumeResult | null>;
  /**
   * A turn on a resident (device tier) context when this worker holds it: the holder's `turn`, admitted and
   * journaled under the same operation id, so whichever way runs it again (a retried workflow task, the
   * holder's queue after a failed local attempt) gets the recorded result.
   */
  turnIfHolder(request: LocalTurnRequest): Promise<TurnResult | null>;
  /**
   * A planned wake-up's prefetch (the holder's `wake`) when this worker holds the context, from any tier:
   * the prefetch is best-effort (a failed one is only logged; the call brings the context back), so it
   * needs no heartbeats, and in the workflow task it costs one marker instead of an activity's events.
   */
  wakeIfHolder(request: LocalResumeRequest): Promise<ResumeResult | null>;
}

/** Run on the holder's worker-specific task queue: one method per operation whose row says `queue: 'holder'`. */
export interface HolderActivities {
  turn(request: TurnRequest): Promise<TurnResult>;
  resume(request: ResumeRequest): Promise<ResumeResult>;
  /**
   * A planned wake-up's prefetch, with the agent's custodian token: a resume that makes no room. Without
   * free device room for the context, nothing moves and the result names the tier it stays on (its digest
   * is then the recorded one, not checked: nothing came back).
   */
  wake(request: ResumeRequest): Promise<ResumeResult>;
  suspend(request: SuspendRequest): Promise<SuspendResult>;
  fork(request: ForkRequest): Promise<ForkResult>;
  /** Frees the child of a fork whose workflow never started; returns the parent's snapshot. */
  unfork(request: ForkRequest): Promise<ContextSnapshot>;
  pin(request: ContextRequest): Promise<ContextSnapshot>;
  unpin(request: ContextRequest): Promise<ContextSnapshot>;
  release(request: ContextRequest): Promise<ReleaseResult>;
  renew(request: RenewRequest): Promise<RenewResult>;
}
