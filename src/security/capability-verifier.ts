// The worker's side: checks a compact JWS capability with public keys only, selected by key id, so keys
// rotate by adding the new public key to every worker before the issuer signs with it. Strict on purpose:
// exactly {alg: EdDSA, kid} in the header (no "none", no HMAC, no embedded or remote keys), a
// bounded length, issuer, audience and time checks with a small clock skew, and every claim well typed.
import { verify, type KeyObject } from 'node:crypto';

import { isAgentId } from '../identity/agent-identity';
import { CAPABILITY_AUDIENCE, CAPABILITY_ISSUER, RIGHTS, isRight, type CapabilityClaims, type DenialReason } from './claims';
import { checkKeyIds, ed25519PublicKey, type RawKey } from './key-list';

/** Far above a real token (about 500 bytes): parsing stays cheap whatever is presented. */
export const MAX_CAPABILITY_LENGTH = 2048;
export const CLOCK_SKEW_S = 30;
/** The longest lifetime a token may claim unless configured otherwise: an agent renews its token within it. */
export const DEFAULT_MAX_CAPABILITY_LIFETIME_S = 7 * 24 * 60 * 60;

export interface VerifierOptions {
  clock?: () => number;
  /** Tokens living longer than this (exp - iat), or expiring further ahead than this, are refused. */
  maxLifetimeS?: number;
}

const COMPACT_JWS = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/;

export class CapabilityDenied extends Error {
  constructor(readonly reason: DenialReason) {
    super(`capability refused: ${reason}`);
    this.name = 'CapabilityDenied';
  }
}

export class CapabilityVerifier {
  private readonly keys: Map<string, KeyObject>;
  private readonly clock: () => number;
  private readonly maxLifetimeS: number;

  constructor(trustedKeys: readonly RawKey[], options: VerifierOptions = {}) {
    checkKeyIds(trustedKeys, 'trusted capability keys');
    this.keys = new Map(trustedKeys.map((k) => [k.id, ed25519PublicKey(k.key)]));
    this.clock = options.clock ?? Date.now;
    this.maxLifetimeS = options.maxLifetimeS ?? DEFAULT_MAX_CAPABILITY_LIFETIME_S;
  }

  /** The claims of an authentic, current token; CapabilityDenied with the reason otherwise. */
  verify(token: unknown): CapabilityClaims {
    if (typeof token !== 'string') throw new CapabilityDenied('malformed');
    if (token.length > MAX_CAPABILITY_LENGTH) throw new CapabilityDenied('oversized');
    if (!COMPACT_JWS.test(token)) throw new CapabilityDenied('malformed');
    const [headerPart, payloadPart, signaturePart] = token.split('.') as [string, string, string];

    const header = parseJson(headerPart);
    if (!header || Object.keys(header).sort().join() !== 'alg,kid' || header.alg !== 'EdDSA' || typeof header.kid !== 'string') {
      throw new CapabilityDenied('bad-header');
    }
    const key = this.keys.get(header.kid);
    if (!key) throw new CapabilityDenied('unknown-key');
    const signature = Buffer.from(signaturePart, 'base64url');
    if (signature.length !== 64 || !verify(null, Buffer.from(`${headerPart}.${payloadPart}`), key, signature)) {
      throw new CapabilityDenied('bad-signature');
    }

    // Authentic from here on; still checked field by field (a key compromise must not mean a crash).
    const claims = parseJson(payloadPart);
    if (!claims || !wellTyped(claims)) throw new CapabilityDenied('bad-claims');
    if (claims.iss !== CAPABILITY_ISSUER) throw new CapabilityDenied('wrong-issuer');
    if (claims.aud !== CAPABILITY_AUDIENCE) throw new CapabilityDenied('wrong-audience');
    const now = this.clock() / 1000;
    if (claims.exp <= now - CLOCK_SKEW_S) throw new CapabilityDenied('expired');
    if ((claims.nbf ?? claims.iat) > now + CLOCK_SKEW_S) throw new CapabilityDenied('not-yet-valid');
    // Genuinely signed is not enough: a token for the year 2500 (a misconfigured issuer, a stolen key) is refused.
    if (claims.exp - claims.iat > this.maxLifetimeS || claims.exp > now + this.maxLifetimeS + CLOCK_SKEW_S)
      throw new CapabilityDenied('lifetime-too-long');
    return claims;
  }
}

function parseJson(part: string): Record<string, unknown> | undefined {
  try {
    const value: unknown = JSON.parse(Buffer.from(part, 'base64url').toString('utf8'));
    return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

function wellTyped(c: Record<string, unknown>): c is Record<string, unknown> & CapabilityClaims {
  const names = [c.ten, c.sub, c.ctx, c.wf];
  const times = [c.iat, c.nbf ?? c.iat, c.exp, c.epoch];
  return (
    names.every((name) => isAgentId(name)) &&
    times.every((n) => Number.isSafeInteger(n) && (n as number) >= 0) &&
    (c.fork === undefined || (typeof c.fork === 'string' && c.fork.length > 0 && c.fork.length <= 64)) &&
    typeof c.jti === 'string' &&
    c.jti.length <= 64 &&
    Array.isArray(c.rights) &&
    c.rights.length <= RIGHTS.length &&
    c.rights.every(isRight)
  );
}
