// What each operation on a context gives back: where the context is and how big, digests, bytes moved and
// timings, never a byte of KV. The activities hand these to the workflow as they are (their contract,
// src/activities/types.ts, names them).
import type { Tier } from '../fabric/tier';
import type { DigestState } from './context-digest';
import type { ContextSnapshot } from './context-snapshot';
import type { TurnReply } from './turn';

/** A new context, or the one an earlier attempt of the same allocation created here. */
export interface Allocated extends ContextSnapshot {
  /** The digest of its (empty) contents. */
  digest: DigestState;
  /** false: an earlier attempt created it on this worker already. */
  created: boolean;
  /**
   * Tokens of the context with a lower epoch are refused from now on: the allocating token's epoch, so no
   * token of an earlier context of the same id (minted before it) opens this one. The workflow presents it
   * with every later call (ContextRequest.revokedBelow).
   */
  revokedBelow: number;
}

export interface TurnResult extends ContextSnapshot {
  /**
   * The digest of the context's pages when the turn ran. A model turn's own KV reaches the pages after
   * its reply (write-behind), so the workflow keeps `added` until a later result's digest covers it.
   */
  digest: DigestState;
  /** Model turns: the token ids the turn added, in order. */
  added?: number[];
  /** The turn was already in the context (applied by an attempt whose worker was lost); verified, not re-applied. */
  alreadyApplied: boolean;
  /** Message turns: what the model said. */
  reply?: TurnReply;
  /**
   * false: a checkpoint was asked for but the disk was full, so the turn is only in memory and the older
   * durable copy stays until a later checkpoint or suspend to disk succeeds. Absent when none was asked.
   */
  durable?: boolean;
}

export interface SuspendResult extends ContextSnapshot {
  /** The digest of the whole context as it left: its pages then hold every turn (the tail is saved). */
  digest: DigestState;
  /** Bytes moved between tiers by this call. */
  bytes: number;
  transferMs: number;
}

/** A resume's whole account: what moved, from where, and the digest checked over what came back (always). */
export interface ResumeResult extends ContextSnapshot {
  /**
   * Bytes moved to the device by this call: 0 when it was resident, and on a model worker resuming from
   * host, whose pages follow to the device write-behind once the engine has loaded them.
   */
  bytes: number;
  transferMs: number;
  /** Where the context was: 'disk' also when the workflow thought 'host' (evicted under pressure). */
  from: Tier;
  /** The digest of the whole context as it came back, checked against `expected` over its first tokens. */
  digest: DigestState;
  verifyMs: number;
  /** Loading it into the worker's model engine (0 without one, or when the engine held it hot). */
  engineLoadMs: number;
}

export interface ForkResult {
  /** The parent's whole context as the child got it (its tail saved first): the child starts from this. */
  digest: DigestState;
  parent: ContextSnapshot;
  child: ContextSnapshot;
  /** The child's Allocated.revokedBelow: its token's epoch, which the child's workflow presents. */
  childRevokedBelow: number;
}

export interface ReleaseResult {
  /** Tokens the context held on this worker (0 when it was not held here). */
  releasedTokens: number;
}

export interface RenewResult {
  /**
   * Tokens of the context with a lower epoch are refused from now on (the replacement's epoch). The
   * workflow presents it with every later call (ContextRequest.revokedBelow).
   */
  revokedBelow: number;
}
