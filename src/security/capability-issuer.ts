// The control plane's side: holds the Ed25519 private keys (by key id) and mints capabilities as compact
// JWS (RFC 7515) with alg EdDSA, so any JOSE library can read them. Workers never hold these keys: they
// verify with public keys only (capability-verifier.ts) and so cannot mint.
import { randomUUID, sign, type KeyObject } from 'node:crypto';

import { FabricError } from '../fabric/errors';
import { CALLER_RIGHTS, CAPABILITY_AUDIENCE, CAPABILITY_ISSUER, CUSTODY, RIGHTS, isRight, type CapabilityClaims, type Right } from './claims';
import { ed25519PrivateKey, type RawKey } from './key-list';

export const DEFAULT_CAPABILITY_LIFETIME_S = 24 * 60 * 60;

export interface MintRequest {
  tenant: string;
  agentId: string;
  /** Defaults to the agent id: one context per agent today. */
  contextId?: string;
  workflowId: string;
  rights?: readonly Right[];
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

export class CapabilityIssuer {
  private readonly keys: Map<string, KeyObject>;

  /** `activeKeyId` signs; the others stay listed only so a rotation can move back. */
  constructor(
    keys: readonly RawKey[],
    private readonly activeKeyId: string = keys[0]?.id ?? '',
    private readonly clock: () => number = Date.now,
  ) {
    this.keys = new Map(keys.map((k) => [k.id, ed25519PrivateKey(k.key)]));
    if (!this.keys.has(activeKeyId)) throw new Error(`capability signing key '${activeKeyId}' is not among the keys given`);
  }

  mint(request: MintRequest): string {
    const rights = [...(request.rights ?? CALLER_RIGHTS)];
    if (!rights.every(isRight)) throw new FabricError('INVALID_ARGUMENT', `rights must be among ${RIGHTS.join(', ')}`);
    const now = this.clock();
    const iat = Math.floor(now / 1000);
    const claims: CapabilityClaims = {
      iss: CAPABILITY_ISSUER,
      aud: CAPABILITY_AUDIENCE,
      ten: request.tenant,
      sub: request.agentId,
      ctx: request.contextId ?? request.agentId,
      wf: request.workflowId,
      rights,
      epoch: request.epoch ?? now,
      jti: randomUUID(),
      iat,
      nbf: iat + (request.notBeforeS ?? 0),
      exp: request.expiresAtS ?? iat + (request.lifetimeS ?? DEFAULT_CAPABILITY_LIFETIME_S),
    };
    return signCompact({ alg: 'EdDSA', typ: 'JWT', kid: this.activeKeyId }, claims, this.keys.get(this.activeKeyId)!);
  }

  /**
   * A fork's capability: for the child context, in the parent's tenant, with at most the parent's rights
   * and no later expiry. The parent's claims are read, not verified: the worker verifies both tokens.
   */
  mintChild(parentToken: string, child: { agentId: string; workflowId: string; rights?: readonly Right[] }): string {
    const parent = readClaimsUnverified(parentToken);
    const rights = (child.rights ?? parent.rights).filter((right) => parent.rights.includes(right));
    return this.mint({ tenant: parent.ten, agentId: child.agentId, workflowId: child.workflowId, rights, expiresAtS: parent.exp });
  }

  /**
   * The custodian token of an agent's token, for its workflow to carry: the same tenant, agent, context,
   * workflow, epoch and expiry, and `custody` as its only right. The same epoch means whatever revokes
   * the agent's token (a release, a renewal) revokes its custodian too.
   */
  mintCustodian(agentToken: string): string {
    const agent = readClaimsUnverified(agentToken);
    return this.mint({ tenant: agent.ten, agentId: agent.sub, contextId: agent.ctx, workflowId: agent.wf, rights: [CUSTODY], epoch: agent.epoch, expiresAtS: agent.exp });
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
