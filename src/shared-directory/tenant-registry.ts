// Tenants are named by strings in workflows, search attributes and the CLI; the allocator and the cold
// tier key blocks by a 32-bit tenant id. The ids come from a registry in the directory every worker
// shares, so two tenants never get the same id (a frame is scrubbed before another tenant's context gets
// it: colliding ids would skip that). A name's first choice is its SHA-256 truncated to 32 bits; a name
// whose choice is taken by another name takes the next free id (linear probing). Each id is a file
// `<id as 8 hex digits>` holding its name sealed for that id (record-seal.ts: a name planted or moved
// there by anyone but a worker is refused), created atomically with link(2), which fails when the file
// exists: whoever links first owns the id, and everyone reads the same answer.
import { createHash } from 'node:crypto';
import { join } from 'node:path';

import { FabricError } from '../fabric/errors';
import type { TenantId } from '../fabric/types';
import { checkTenantName } from '../identity/agent-identity';
import { removeStaleTempFilesIn, STALE_TEMP_AGE_MS } from '../blob-store/posix/temp-files';
import { createOnce, syncDirectory } from '../blob-store/posix/durable-file';
import { openPrivateDirectory } from '../blob-store/posix/private-directory';
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
  /** Assigned ids never change: each process asks the directory once per name. */
  private readonly known = new Map<string, TenantId>();

  private constructor(
    private readonly directory: string,
    private readonly seal: RecordSeal,
  ) {}

  static async open(directory: string, seal: RecordSeal): Promise<TenantRegistry> {
    await openPrivateDirectory(directory, 'the tenant registry');
    await removeStaleTempFilesIn(directory, STALE_TEMP_AGE_MS);
    return new TenantRegistry(directory, seal);
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
    throw new FabricError('UNAVAILABLE', `no tenant id for ${tenant} after ${MAX_PROBES} probes in ${this.directory}`);
  }

  private nameOf(id: TenantId): string {
    return id.toString(16).padStart(8, '0');
  }

  /** The name the id's file holds; undefined for a free id. INTEGRITY (audited) for a file no worker sealed for this id. */
  private ownerOf(id: TenantId): Promise<string | undefined> {
    return this.seal.read(join(this.directory, this.nameOf(id)), RECORD_KIND, this.nameOf(id));
  }

  /** Creates the id's record naming `tenant` unless it has one; returns whoever owns the id afterwards. */
  private async claim(id: TenantId, tenant: string): Promise<string | undefined> {
    try {
      if (!(await createOnce(this.directory, join(this.directory, this.nameOf(id)), this.seal.seal(RECORD_KIND, this.nameOf(id), tenant))))
        return this.ownerOf(id); // someone linked first
      await syncDirectory(this.directory, `the tenant registry in ${this.directory}`);
      return tenant;
    } catch (err) {
      throw err instanceof FabricError
        ? err
        : new FabricError('UNAVAILABLE', `tenant registry ${this.directory}: ${(err as Error).message}`);
    }
  }
}
