// The control plane's side: holds the Ed25519 private keys (by key id) and mints capabilities as compact
// JWS (RFC 7515) with alg EdDSA, so any JOSE library can read them. Workers never hold these keys: they
// verify with public keys only (capability-verifier.ts) and so cannot mint.
import { randomBytes, randomUUID, sign, type KeyObject } from 'node:crypto';

import { FabricError } from '../fabric/errors';
import { CapabilityDenied, CapabilityVerifier, DEFAULT_MAX_CAPABILITY_LIFETIME_S } from './capability-verifier';
import {
  CALLER_RIGHTS,
  CAPABILITY_AUDIENCE,
  CAPABILITY_ISSUER,
  CUSTODY,
  RIGHTS,
  isRight,
  type CapabilityClaims,
  type Right,
} from './claims';
import { checkKeyIds, ed25519PrivateKey, ed25519PublicOf, type RawKey } from './key-list';

export const DEFAULT_CAPABILITY_LIFETIME_S = 24 * 60 * 60;

export interface IssuerOptions {
  /** The key id that signs (default: the first key); the others stay listed only so a rotation can move back. */
  activeKeyId?: string;
  clock?: () => number;
  /**
   * The longest lifetime a token may have, in seconds (default 7 days); workers enforce the same cap
   * (CapabilityVerifier), so a token minted past it by a misconfigured issuer is refused there too.
   */
  maxLifetimeS?: number;
}

export interface MintRequest {
  tenant: string;
  agentId: string;
  /** Defaults to the agent id: one context per agent today. */
  contextId?: string;
  workflowId: string;
  rights?: readonly Right[];
  /** A fork's child token (and its custodian): the fork that creates the child context (see claims.ts). */
  fork?: string;
  /**
   * The context's generation. Defaults to the mint time in milliseconds: a context id reused after a
   * release gets a higher epoch than any token of the released one without the control plane asking
   * a worker for its record.
   */
  epoch?: number;
  lifetimeS?: number;
  /** An absolute expiry (seconds since the epoch) instead of a lifetime: a derived token never outlives its source. */
  expiresAtS?: number;
  /** Not valid before this many seconds from now (default 0). */
  notBeforeS?: number;
}

/** 128 random bits in 22 characters: every call carries its token, so every call's history holds it. */
function tokenId(): string {
  return randomBytes(16).toString('base64url');
}

export class CapabilityIssuer {
  private readonly keys: Map<string, KeyObject>;
  private readonly activeKeyId: string;
  private readonly clock: () => number;
  private readonly maxLifetimeS: number;
  /** The public halves of the signing keys: a token is derived from only after it verifies with them. */
  private readonly verifier: CapabilityVerifier;

  constructor(keys: readonly RawKey[], options: IssuerOptions = {}) {
    checkKeyIds(keys, 'capability signing keys'); // a key id is every token's `kid`
    this.activeKeyId = options.activeKeyId ?? keys[0]?.id ?? '';
    this.clock = options.clock ?? Date.now;
    this.maxLifetimeS = options.maxLifetimeS ?? DEFAULT_MAX_CAPABILITY_LIFETIME_S;
    this.keys = new Map(keys.map((k) => [k.id, ed25519PrivateKey(k.key)]));
    if (!this.keys.has(this.activeKeyId)) throw new Error(`capability signing key '${this.activeKeyId}' is not among the keys given`);
    const trusted = keys.map(({ id, key }) => ({ id, key: ed25519PublicOf(key) }));
    this.verifier = new CapabilityVerifier(trusted, { clock: this.clock, maxLifetimeS: this.maxLifetimeS });
  }

  mint(request: MintRequest): string {
    const rights = [...(request.rights ?? CALLER_RIGHTS)];
    if (!rights.every(isRight)) throw new FabricError('INVALID_ARGUMENT', `rights must be among ${RIGHTS.join(', ')}`);
    const now = this.clock();
    const iat = Math.floor(now / 1000);
    const exp = request.expiresAtS ?? iat + (request.lifetimeS ?? DEFAULT_CAPABILITY_LIFETIME_S);
    if (exp - iat > this.maxLifetimeS) {
      throw new FabricError('INVALID_ARGUMENT', `a capability lives at most ${this.maxLifetimeS} s (asked: ${exp - iat} s)`);
    }
    const claims: CapabilityClaims = {
      iss: CAPABILITY_ISSUER,
      aud: CAPABILITY_AUDIENCE,
      ten: request.tenant,
      sub: request.agentId,
      ctx: request.contextId ?? request.agentId,
      wf: request.workflowId,
      rights,
      epoch: request.epoch ?? now,
      ...(request.fork === undefined ? {} : { fork: request.fork }),
      jti: tokenId(),
      iat,
      ...(request.notBeforeS ? { nbf: iat + request.notBeforeS } : {}),
      exp,
    };
    return signCompact({ alg: 'EdDSA', kid: this.activeKeyId }, claims, this.keys.get(this.activeKeyId)!);
  }

  /**
   * A fork's capability: for the child context, in the parent's tenant, with at most the parent's rights
   * and no later expiry, marked with a fresh fork id so that it is good only for the context this fork
   * creates (a worker refuses it for any context that exists already). The parent token must verify and
   * carry the `fork` right: claims are derived only from a token this issuer's keys signed.
   */
  mintChild(parentToken: string, child: { agentId: string; workflowId: string; rights?: readonly Right[] }): string {
    const parent = this.verified(parentToken);
    if (!parent.rights.includes('fork')) throw new FabricError('PERMISSION_DENIED', 'the parent capability has no fork right');
    const rights = (child.rights ?? parent.rights).filter((right) => parent.rights.includes(right));
    return this.mint({
      tenant: parent.ten,
      agentId: child.agentId,
      workflowId: child.workflowId,
      rights,
      expiresAtS: parent.exp,
      fork: randomUUID(),
    });
  }

  /**
   * The custodian token of an agent's token, for its workflow to carry: the same tenant, agent, context,
   * workflow, epoch, fork and expiry, and `custody` as its only right. The same epoch means whatever
   * revokes the agent's token (a release, a renewal) revokes its custodian too. The agent token must
   * verify, and be a caller's token (a custodian of a custodian is no one's).
   */
  mintCustodian(agentToken: string): string {
    const agent = this.verified(agentToken);
    if (agent.rights.includes(CUSTODY))
      throw new FabricError('INVALID_ARGUMENT', 'a custodian token is minted from the agent token, not from another custodian');
    return this.mint({
      tenant: agent.ten,
      agentId: agent.sub,
      contextId: agent.ctx,
      workflowId: agent.wf,
      rights: [CUSTODY],
      epoch: agent.epoch,
      expiresAtS: agent.exp,
      ...(agent.fork === undefined ? {} : { fork: agent.fork }),
    });
  }

  /**
   * A renewal's replacement for `currentToken`: the same tenant, agent, context and workflow, a fresh
   * epoch and expiry, and the presented token's rights (or fewer: `rights` narrows, never widens). The
   * current token must verify and hold the `renew` right, as a worker requires: a renewal outlives its
   * source, so a short-lived delegate without that right must not come back as a day-long one. A worker
   * accepting the replacement revokes every older token of the context.
   */
  renewal(currentToken: string, options: { rights?: readonly Right[]; lifetimeS?: number } = {}): string {
    const current = this.verified(currentToken);
    if (current.rights.includes(CUSTODY))
      throw new FabricError('PERMISSION_DENIED', 'a custodian token cannot be renewed: renew the agent token');
    if (!current.rights.includes('renew'))
      throw new FabricError('PERMISSION_DENIED', 'cannot renew this capability: it has no renew right');
    const rights = (options.rights ?? current.rights).filter((right) => current.rights.includes(right));
    return this.mint({
      tenant: current.ten,
      agentId: current.sub,
      contextId: current.ctx,
      workflowId: current.wf,
      rights,
      ...(options.lifetimeS === undefined ? {} : { lifetimeS: options.lifetimeS }),
    });
  }

  /** The claims of a token these keys signed, current and within the lifetime cap; PERMISSION_DENIED otherwise. */
  private verified(token: string): CapabilityClaims {
    try {
      return this.verifier.verify(token);
    } catch (err) {
      if (err instanceof CapabilityDenied)
        throw new FabricError('PERMISSION_DENIED', `cannot derive a capability from this token: ${err.reason}`);
      throw err;
    }
  }
}

/** Header and payload as base64url JSON, signed over `header.payload` (JWS signing input). */
export function signCompact(header: object, payload: object, key: KeyObject): string {
  const input = `${b64(JSON.stringify(header))}.${b64(JSON.stringify(payload))}`;
  return `${input}.${sign(null, Buffer.from(input), key).toString('base64url')}`;
}

/** The claims of a token this process minted or holds; never a basis for any decision on access. */
export function readClaimsUnverified(token: string): CapabilityClaims {
  const payload = token.split('.')[1];
  try {
    return JSON.parse(Buffer.from(payload ?? '', 'base64url').toString('utf8')) as CapabilityClaims;
  } catch {
    throw new FabricError('INVALID_ARGUMENT', 'not a capability');
  }
}

function b64(text: string): string {
  return Buffer.from(text, 'utf8').toString('base64url');
}
