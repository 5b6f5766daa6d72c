// The one place a presented capability is checked, before anything touches the tier layer. A token must
// be authentic and current (CapabilityVerifier: Ed25519, trusted key id, expiry), name this tenant,
// agent, context and calling workflow, carry the right the action needs, and have an epoch no lower than
// the context's revocation record. Then the worker's own grant (who created the context) must agree:
// the token is necessary, not sufficient. Every refusal is audited (never the token) and counted.
import { FabricError } from '../fabric/errors';
import { CapabilityDenied, type CapabilityVerifier } from '../security/capability-verifier';
import { CUSTODY, type CapabilityClaims, type DenialReason, type Right } from '../security/claims';
import type { AuditSink } from '../security/audit-log';
import type { Grant } from '../shared-directory/grant-store';
import type { EpochStore } from '../shared-directory/epochs';
import { OPERATION_NAMES, OPERATIONS, type Operation } from '../operations/operations';

/** The right a caller's token needs for each operation: its row's `right` in OPERATIONS. */
export const RIGHT_FOR = Object.fromEntries(OPERATION_NAMES.map((operation) => [operation, OPERATIONS[operation].right])) as Record<
  Operation,
  Right
>;

/**
 * What a custodian token (`custody`, its only right) allows: the operations whose row says `custody`, the
 * moves the agent's workflow makes on its own, none of which reads, writes or ends the context's bytes.
 * Its own right, not a subset of the caller rights: 'resume' (which recover needs) would also resume the
 * context for a caller, and 'turn' (which allocate needs) would write turns.
 */
export const CUSTODY_ACTIONS: ReadonlySet<Operation> = new Set(OPERATION_NAMES.filter((operation) => OPERATIONS[operation].custody));

/** A call as the worker sees it: what is asked, by whom, from which workflow, with which token. */
export interface Presented {
  contextId: string;
  agentId: string;
  tenant: string;
  workflowId: string;
  action: Operation;
  token: unknown;
  /**
   * The context's revocation epoch as the calling workflow last raised it (ContextRequest.revokedBelow):
   * a store that holds a lower one lost an entry, INTEGRITY, even on a worker that never read it.
   */
  revokedBelow?: number;
}

export class CapabilityCheck {
  constructor(
    private readonly verifier: CapabilityVerifier,
    private readonly epochs: EpochStore,
    private readonly audit: AuditSink | undefined,
    private readonly onDenied: (action: string) => void = () => undefined,
  ) {}

  /** The token's claims if it allows the call; PERMISSION_DENIED (audited) otherwise. */
  async claimsFor(call: Presented): Promise<CapabilityClaims> {
    return this.checked(call, await this.verified(call));
  }

  /**
   * A retry of an operation whose own success revoked the token (release, renew): the token must still be
   * authentic, current, the call's and carry the right, but the epoch its operation raised is not held
   * against it. Only for a retry the operation journal recorded under this very token and run.
   */
  async retryClaimsFor(call: Presented): Promise<CapabilityClaims> {
    return this.checked(call, await this.verified(call), true, false);
  }

  /**
   * The grant must name the token's tenant and agent: a valid token for a context someone else holds is
   * refused. A fork's token is good only for the context its own fork created: one minted for the id of
   * an agent that exists already (a sibling, a typo of one) opens nothing.
   */
  async agree(call: Presented, grant: Grant, claims: CapabilityClaims): Promise<void> {
    if (grant.contextId !== claims.ctx || grant.tenant !== claims.ten || grant.agentId !== claims.sub) await this.deny(call, 'not-owner');
    if (claims.fork !== undefined && claims.fork !== grant.fork) await this.deny(call, 'not-owner');
  }

  /**
   * A fork's child token: for the child context and agent, bound to the child's workflow, in the
   * parent's tenant (a child token of another tenant is a cross-tenant share), with at most the
   * parent's rights and no later expiry.
   */
  async childClaims(call: Presented, parent: CapabilityClaims): Promise<CapabilityClaims> {
    const child = await this.verified(call);
    if (child.ten !== parent.ten) return this.deny(call, 'cross-tenant');
    // Minted by mintChild for this fork alone: an agent's own token cannot become someone's child.
    if (child.fork === undefined) return this.deny(call, 'not-a-fork-token');
    // The child needs no particular right to come into being: only none beyond its parent's.
    await this.checked(call, child, false);
    if (!child.rights.every((right) => parent.rights.includes(right)) || child.exp > parent.exp)
      return this.deny(call, 'rights-escalation');
    return child;
  }

  /**
   * A renewal's replacement token: same tenant, agent, context and workflow as the call, no right the
   * current token lacks, and newer than it, with `custodian` its custodian token (custodianOf). Accepting
   * it revokes every older token, the current one too.
   */
  async renewal(call: Presented, current: CapabilityClaims, custodian: unknown): Promise<CapabilityClaims> {
    const next = await this.checked(call, await this.verified(call), false);
    if (!next.rights.every((right) => current.rights.includes(right))) return this.deny(call, 'rights-escalation');
    if (next.epoch <= current.epoch) return this.deny(call, 'revoked');
    await this.custodianOf({ ...call, token: custodian }, next);
    await this.revoke(call.contextId, next.epoch);
    return next;
  }

  /**
   * A custodian token given with `agent` (its workflow will carry it): the call's identity, `custody` as
   * its only right, the agent token's epoch (so what revokes one revokes both) and no later expiry.
   */
  async custodianOf(call: Presented, agent: CapabilityClaims): Promise<CapabilityClaims> {
    const custodian = await this.checked(call, await this.verified(call), false);
    const onlyCustody = custodian.rights.length === 1 && custodian.rights[0] === CUSTODY;
    if (!onlyCustody || custodian.epoch !== agent.epoch || custodian.exp > agent.exp) return this.deny(call, 'not-custodian');
    return custodian;
  }

  private async verified(call: Presented): Promise<CapabilityClaims> {
    try {
      return this.verifier.verify(call.token);
    } catch (err) {
      if (err instanceof CapabilityDenied) return this.deny(call, err.reason);
      throw err;
    }
  }

  private async checked(call: Presented, claims: CapabilityClaims, needsRight = true, checkEpoch = true): Promise<CapabilityClaims> {
    const reason = mismatch(claims, call, needsRight);
    if (reason) return this.deny(call, reason);
    if (checkEpoch && claims.epoch < (await this.epochs.minimum(call.contextId, call.revokedBelow))) return this.deny(call, 'revoked');
    return claims;
  }

  /** Audits and counts a refusal whose error the caller raises itself (a stale manifest is INTEGRITY, not a denial). */
  async record(call: Presented, reason: DenialReason): Promise<void> {
    this.onDenied(call.action);
    await this.audit
      ?.denied({ agent: call.agentId, tenant: call.tenant, context: call.contextId, action: call.action, reason })
      .catch(() => undefined);
  }

  /** Release and hand-off: tokens of the context with a lower epoch are refused from now on. */
  async revoke(contextId: string, minimumEpoch: number): Promise<void> {
    await this.epochs.raise(contextId, minimumEpoch);
  }

  async deny(call: Presented, reason: DenialReason): Promise<never> {
    await this.record(call, reason);
    // The message names the reason, never the token.
    throw new FabricError('PERMISSION_DENIED', `${call.action} of context ${call.contextId} denied: ${reason}`);
  }
}

function mismatch(claims: CapabilityClaims, call: Presented, needsRight: boolean): DenialReason | undefined {
  if (claims.ten !== call.tenant) return 'wrong-tenant';
  if (claims.ctx !== call.contextId) return 'wrong-context';
  if (claims.sub !== call.agentId) return 'wrong-agent';
  if (claims.wf !== call.workflowId) return 'wrong-workflow';
  if (needsRight && !allows(claims.rights, call.action)) return claims.rights.includes(CUSTODY) ? 'custodian-token' : 'missing-right';
  return undefined;
}

function allows(rights: readonly Right[], action: Operation): boolean {
  return rights.includes(RIGHT_FOR[action]) || (rights.includes(CUSTODY) && CUSTODY_ACTIONS.has(action));
}
