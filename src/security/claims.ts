// What a capability says: who (tenant, agent), on what (context, the workflow it is bound to), may do
// which actions, until when, at which epoch. Workers accept a token only if every claim matches the
// call and the context's own records (grant, epoch); the token is necessary, never sufficient.

import type { CallerRight } from '../operations/operations';

/**
 * The rights of a caller's token, each named after the operations it allows (OPERATIONS' `right`): the
 * default of a minted token. A delegate gets fewer (a resume-only token cannot renew, which would revoke
 * its owner).
 */
export const CALLER_RIGHTS = ['turn', 'resume', 'suspend', 'fork', 'release', 'renew'] as const satisfies readonly CallerRight[];
/**
 * The only right of a custodian token, the one the agent's workflow carries for what it does on its own
 * (allocation at start, timers, failover): the operations whose row says `custody` (src/operations).
 */
export const CUSTODY = 'custody';
export const RIGHTS = [...CALLER_RIGHTS, CUSTODY] as const;
export type Right = (typeof RIGHTS)[number];

/** Fixed strings in every token: a token minted for another system or audience is not ours. */
export const CAPABILITY_ISSUER = 'kvfabric-control-plane';
export const CAPABILITY_AUDIENCE = 'kvfabric-worker';

export interface CapabilityClaims {
  iss: typeof CAPABILITY_ISSUER;
  aud: typeof CAPABILITY_AUDIENCE;
  /** Tenant name. Sharing (fork) never crosses it. */
  ten: string;
  /** Agent id: the identity acting on the context. */
  sub: string;
  /** Context id (not a block id: blocks move and are reused). */
  ctx: string;
  /** Workflow id the token is bound to: only that workflow's activities may present it. */
  wf: string;
  rights: Right[];
  /**
   * The context's generation when minted. A worker refuses tokens below the context's recorded epoch,
   * which release (and hand-off) raise past every token seen so far.
   */
  epoch: number;
  /**
   * Set on a fork's child token and its custodian: the fork that creates the child context. Such a token is
   * accepted only by the context that fork created (its grant names the fork), never by an existing one.
   */
  fork?: string;
  /** Unique token id: names the token in the issuer's records without carrying it. */
  jti: string;
  /** Seconds since the epoch (JWT NumericDate). */
  iat: number;
  /** Not valid before; left out when that is `iat` (every token is carried by every call, in history). */
  nbf?: number;
  exp: number;
}

/** Why a presented capability was refused: stable codes for the audit log and for tests. */
export type DenialReason =
  | 'malformed'
  | 'oversized'
  | 'bad-header'
  | 'unknown-key'
  | 'bad-signature'
  | 'bad-claims'
  | 'wrong-issuer'
  | 'wrong-audience'
  | 'expired'
  | 'not-yet-valid'
  | 'wrong-tenant'
  | 'wrong-agent'
  | 'wrong-context'
  | 'wrong-workflow'
  | 'missing-right'
  | 'revoked'
  | 'not-owner'
  | 'cross-tenant'
  | 'rights-escalation'
  /** A custodian token presented for an action only a caller's token allows (read, append, fork, release, ...). */
  | 'custodian-token'
  /** A token given as another's custodian is not one: other rights, another epoch, or a later expiry. */
  | 'not-custodian'
  /** A fork's child presented with a token not minted for a fork (no `fork` claim). */
  | 'not-a-fork-token'
  /** A fork onto a context that exists already: forks create their child, they never take one over. */
  | 'context-exists'
  /** A token whose lifetime exceeds the configured maximum (or that expires further ahead than it). */
  | 'lifetime-too-long'
  /** A manifest older than the newest its workflow saw written (put back: a rollback); the call fails INTEGRITY. */
  | 'stale-manifest'
  /** A manifest found where the grant says the context is belongs to another tenant (swapped, tampered). */
  | 'foreign-manifest'
  /** A record of the shared directory (grant, epoch, fence, tenant id) that does not authenticate: planted, moved or damaged. */
  | 'forged-record';

export function isRight(value: unknown): value is Right {
  return typeof value === 'string' && (RIGHTS as readonly string[]).includes(value);
}
