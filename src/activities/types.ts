// The activities' contract with the workflow. Workflows import this file with `import type` only, so
// nothing native reaches the workflow bundle. No field ever carries KV bytes: only counts, digests and
// the task queue of the worker that holds a context.
import type { ModelShape } from '../fabric/types';
import type { Tier } from '../fabric/tier';
import type { ContextSnapshot } from '../agent-memory/context-snapshot';
import type { DigestState } from '../agent-memory/context-digest';
import type { TurnGeneration, TurnReply } from '../agent-memory/turn';

export type { DigestState } from '../agent-memory/context-digest';
export type { TurnGeneration, TurnReply } from '../agent-memory/turn';
export type { ContextSnapshot } from '../agent-memory/context-snapshot';

export type { Tier } from '../fabric/tier';

/** Every call names the context (the agent id), its tenant, the caller's capability and an operation id. */
export interface ContextRequest {
  agentId: string;
  tenant: string;
  /** A signed capability (src/security); checked by the worker before anything else, never logged. */
  capability: string;
  /** Unique per call within the agent (the workflow's operation counter): a retry carries the same id. */
  operationId: string;
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

/** A new context: its placement and the digest of its (empty) contents. */
export interface Allocation extends Placement {
  digest: DigestState;
}

export interface RecoverRequest extends ContextRequest {
  /** Which failover of the agent this is (1, 2, ...): the adopting worker claims the context with it. */
  epoch?: number;
  /** The newest durable-copy version the workflow saw (ContextSnapshot.durableVersion): older manifests are refused. */
  minVersion: number;
}

export interface TurnRequest extends ContextRequest {
  /** The agent's own turn number: with the agent id, it determines a synthetic turn's KV bytes. */
  turn: number;
  /** Synthetic engine: the turn's token count. Exactly one of tokens and message. */
  tokens?: number;
  /** Model engine: the user's message, and how to write the reply. */
  message?: string;
  generation?: TurnGeneration;
  /** The context's digest before this turn (the workflow's record). */
  before: DigestState;
  /** Write the durable copy after appending (the workflow's durability policy). */
  checkpoint: boolean;
}

export interface TurnResult extends ContextSnapshot {
  digest: DigestState;
  appendMs: number;
  /** The turn was already in the context (applied by an attempt whose worker was lost); verified, not re-applied. */
  alreadyApplied: boolean;
  /** Message turns: what the model said. */
  reply?: TurnReply;
  /**
   * false: a checkpoint was asked for but the disk was full, so the turn is only in memory and the older
   * durable copy stays until a later checkpoint or offload to disk succeeds. Absent when none was asked.
   */
  durable?: boolean;
}

export interface ShareRequest extends ContextRequest {
  childId: string;
  childCapability: string;
  /** The child's custodian token (minted with childCapability), checked here before the child workflow carries it. */
  childCustodian?: string;
  checkpoint: boolean;
}

export interface ShareResult {
  parent: ContextSnapshot;
  child: ContextSnapshot;
}

export interface OffloadRequest extends ContextRequest {
  tier: 'host' | 'disk';
}

export interface TransferResult extends ContextSnapshot {
  /** Bytes moved between tiers by this call. */
  bytes: number;
  transferMs: number;
}

export interface RestoreRequest extends ContextRequest {
  /** The context must begin with exactly these bytes; it may be longer only by a turn in flight. */
  expected: DigestState;
  /**
   * Recompute the digest over every byte. Without it only the token count is checked (the cold tier
   * authenticates every block it reads anyway); a context longer than expected is always verified.
   */
  verify: boolean;
}

export interface RestoreResult extends TransferResult {
  /** Where the context was: 'disk' also when the workflow thought 'host' (evicted under pressure). */
  from?: Tier;
  /** Digest recomputed over every byte that came back (the expected one when not verified). */
  digest: DigestState;
  verified: boolean;
  verifyMs: number;
}

/** A restore the workflow asks of its own worker, as a local activity: done there only if that worker is the holder. */
export interface LocalRestoreRequest extends RestoreRequest {
  /** The holder the workflow recorded: the worker running the workflow task restores only if it is this one. */
  holder: string;
}

export interface RenewRequest extends ContextRequest {
  /** The replacement capability; `capability` is the one it replaces. */
  next: string;
  /** The replacement's custodian token, which the workflow carries from then on. */
  nextCustodian?: string;
}

export interface ReleaseResult {
  releasedTokens: number;
}

/** Run on the shared task queue: whichever worker takes the call holds the context afterwards. */
export interface PlacementActivities {
  allocate(request: AllocateRequest): Promise<Allocation>;
  /** Adopts a context from the cold tier (its worker is gone). */
  recover(request: RecoverRequest): Promise<Placement>;
  /**
   * Ends a context that cannot be adopted (its holder died and no readable durable copy exists): deletes
   * whatever durable copy remains, revokes its tokens and drops its grant, on whichever worker takes it.
   */
  retire(request: ContextRequest): Promise<ReleaseResult>;
}

/**
 * Run as local activities by the worker that runs the agent workflow's task, in that task: no activity
 * task passes through the server. Each acts only when that worker holds the context, and otherwise
 * answers null: the workflow then calls the holder through its queue as usual.
 */
export interface LocalActivities {
  /** A restore from memory (device or host tier) when this worker holds the context. */
  restoreIfHolder(request: LocalRestoreRequest): Promise<RestoreResult | null>;
}

/** Run on the holder's worker-specific task queue. */
export interface ContextActivities {
  appendTurn(request: TurnRequest): Promise<TurnResult>;
  pin(request: ContextRequest): Promise<ContextSnapshot>;
  unpin(request: ContextRequest): Promise<ContextSnapshot>;
  /** Fork: the child context shares the parent's blocks (copy-on-write) on the same worker. */
  share(request: ShareRequest): Promise<ShareResult>;
  offload(request: OffloadRequest): Promise<TransferResult>;
  restore(request: RestoreRequest): Promise<RestoreResult>;
  release(request: ContextRequest): Promise<ReleaseResult>;
  /**
   * Undoes a share whose child workflow never started, with the parent's capability (the child's is
   * bound to a workflow that does not exist): frees the child context, its grant and its tokens. Returns
   * the parent's snapshot (its blocks are no longer shared with the child).
   */
  unshare(request: ShareRequest): Promise<ContextSnapshot>;
  /** Accepts a replacement capability and revokes every older token of the context. */
  renew(request: RenewRequest): Promise<void>;
}
