// The one place a presented capability is checked. Until the security issue lands, a capability is an
// opaque random token the client mints at agent start; the worker keeps only its SHA-256 in a grant and
// compares digests in constant time. The Ed25519 verification replaces `grantFor` and `authorize` here;
// callers already pass the presented token and the context's grant, so nothing else changes.
import { createHash, timingSafeEqual } from 'node:crypto';

import { FabricError } from '../fabric/errors';

/** Who may touch a context, as recorded by the worker that created it. Holds no secret. */
export interface Grant {
  contextId: string;
  tenant: string;
  /** SHA-256 (hex) of the capability presented at creation. */
  capabilityDigest: string;
}

const CAPABILITY = /^[\x21-\x7e]{16,1024}$/;

export function checkCapabilityFormat(capability: unknown): asserts capability is string {
  // The message never echoes the value: a malformed token may still be someone's secret.
  if (typeof capability !== 'string' || !CAPABILITY.test(capability)) {
    throw new FabricError('INVALID_ARGUMENT', 'capability must be 16 to 1024 printable ASCII characters');
  }
}

export function grantFor(contextId: string, tenant: string, capability: string): Grant {
  checkCapabilityFormat(capability);
  return { contextId, tenant, capabilityDigest: digestOf(capability) };
}

/** PERMISSION_DENIED unless `presented` is the capability the grant was made for, for that tenant. */
export function authorize(grant: Grant, tenant: string, presented: unknown, action: string): void {
  const ok =
    typeof presented === 'string' &&
    CAPABILITY.test(presented) &&
    grant.tenant === tenant &&
    timingSafeEqual(Buffer.from(digestOf(presented), 'hex'), Buffer.from(grant.capabilityDigest, 'hex'));
  if (!ok) throw new FabricError('PERMISSION_DENIED', `${action} of context ${grant.contextId}: the capability presented does not grant it`);
}

function digestOf(capability: string): string {
  return createHash('sha256').update(`kvfabric.capability.v1\0${capability}`).digest('hex');
}
