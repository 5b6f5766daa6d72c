// Tenants are named by strings in workflows, search attributes and the CLI; the allocator and the cold
// tier key blocks by a 32-bit tenant id. The id is the name's SHA-256 truncated to 32 bits: stable across
// processes and machines with no registry to keep, at the cost of a collision chance of about n^2 / 2^33
// for n tenants (a registry replaces this when tenants number in the tens of thousands).
import { createHash } from 'node:crypto';

import { FabricError } from '../fabric/errors';
import type { TenantId } from '../fabric/types';

const TENANT_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/;

export function tenantIdOf(tenant: string): TenantId {
  if (typeof tenant !== 'string' || !TENANT_NAME.test(tenant)) {
    throw new FabricError('INVALID_ARGUMENT', 'tenant must be 1 to 63 characters: letters, digits, ".", "_" or "-", starting with a letter or digit');
  }
  const id = createHash('sha256').update(`kvfabric.tenant.v1\0${tenant}`).digest().readUInt32BE(0);
  return id === 0 ? 1 : id; // 0 is not a tenant to the allocator
}
