// Tenants are named by strings in workflows, search attributes and the CLI; the allocator and the cold
// tier key blocks by a 32-bit tenant id. The ids come from a registry in the store every worker shares
// (a directory or a bucket), so two tenants never get the same id (a frame is scrubbed before another
// tenant's context gets it: colliding ids would skip that). A name's first choice is its SHA-256
// truncated to 32 bits; a name whose choice is taken by another name takes the next free id (linear
// probing). Each id is a key `<id as 8 hex digits>` holding its name sealed for that id (record-seal.ts:
// a name planted or moved there by anyone but a worker is refused), put only if the key is absent
// (If-None-Match: *): whoever puts first owns the id, and everyone reads the same answer.
import { createHash } from 'node:crypto';

import { isPreconditionFailed } from '../blob-store/blob-errors';
import type { BlobStore } from '../blob-store/blob-store';
import { FabricError } from '../fabric/errors';
import type { TenantId } from '../fabric/types';
import { checkTenantName } from '../identity/agent-identity';
import { openRecordPrefix } from './record-prefix';
import type { RecordSeal } from './record-seal';

/** Ids tried after a name's first choice before giving up: far more than any real collision chain. */
const MAX_PROBES = 4096;
const RECORD_KIND = 'tenant-id';

/** A name's first-choice id (never 0: 0 is not a tenant to the allocator). */
export function preferredTenantId(tenant: string): TenantId {
  const id = createHash('sha256').update(`kvfabric.tenant.v1\0${tenant}`).digest().readUInt32BE(0);
  return id === 0 ? 1 : id;
}

export class TenantRegistry {
  /** Assigned ids never change: each process asks the store once per name. */
  private readonly known = new Map<string, TenantId>();

  private constructor(
    private readonly store: BlobStore,
    /** Where the ids are in the store ("tenants/"). */
    private readonly prefix: string,
    private readonly seal: RecordSeal,
  ) {}

  /** The registry under `prefix` ("tenants/") of `store`. */
  static async open(store: BlobStore, prefix: string, seal: RecordSeal): Promise<TenantRegistry> {
    await openRecordPrefix(store, prefix, 'the tenant registry');
    return new TenantRegistry(store, prefix, seal);
  }

  /** The tenant's id, assigning one on first use. */
  async idOf(tenant: string): Promise<TenantId> {
    checkTenantName(tenant);
    const cached = this.known.get(tenant);
    if (cached !== undefined) return cached;
    let id = preferredTenantId(tenant);
    for (let probe = 0; probe < MAX_PROBES; probe++) {
      const owner = (await this.ownerOf(id)) ?? (await this.claim(id, tenant));
      if (owner === tenant) {
        this.known.set(tenant, id);
        return id;
      }
      id = id === 0xffffffff ? 1 : id + 1;
    }
    throw new FabricError('UNAVAILABLE', `no tenant id for ${tenant} after ${MAX_PROBES} probes in ${this.store.location}${this.prefix}`);
  }

  private nameOf(id: TenantId): string {
    return id.toString(16).padStart(8, '0');
  }

  /** The name the id's record holds; undefined for a free id. INTEGRITY (audited) for a record no worker sealed for this id. */
  private ownerOf(id: TenantId): Promise<string | undefined> {
    return this.seal.read(this.store, this.prefix + this.nameOf(id), RECORD_KIND, this.nameOf(id));
  }

  /** Creates the id's record naming `tenant` unless it has one; returns whoever owns the id afterwards. */
  private async claim(id: TenantId, tenant: string): Promise<string | undefined> {
    try {
      await this.store.put(this.prefix + this.nameOf(id), this.seal.seal(RECORD_KIND, this.nameOf(id), tenant), { ifNoneMatch: '*' });
      return tenant;
    } catch (err) {
      if (!isPreconditionFailed(err)) throw err;
      return this.ownerOf(id); // someone put it first
    }
  }
}
