// Tenants are named by strings in workflows, search attributes and the CLI; the allocator and the cold
// tier key blocks by a 32-bit tenant id. The ids come from a registry in the directory every worker
// shares, so two tenants never get the same id (a frame is scrubbed before another tenant's context gets
// it: colliding ids would skip that). A name's first choice is its SHA-256 truncated to 32 bits; a name
// whose choice is taken by another name takes the next free id (linear probing). Each id is a file
// `<id as 8 hex digits>` holding its name, created atomically with link(2), which fails when the file
// exists: whoever links first owns the id, and everyone reads the same answer.
import { createHash, randomBytes } from 'node:crypto';
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';

import { FabricError } from '../fabric/errors';
import type { TenantId } from '../fabric/types';
import { checkTenantName } from '../identity/agent-identity';
import { removeStaleTempFilesIn, tempFileName } from '../tiers/cold/cold-directory';
import { syncDirectory } from '../tiers/cold/durable-file';
import { openPrivateDirectory, PRIVATE_FILE_MODE } from '../tiers/cold/private-directory';

/** Ids tried after a name's first choice before giving up: far more than any real collision chain. */
const MAX_PROBES = 4096;
/** A claim's temp file lives for one write and one link: one an hour old was left by a crash. */
const STALE_TEMP_AGE_MS = 3600_000;

/** A name's first-choice id (never 0: 0 is not a tenant to the allocator). */
export function preferredTenantId(tenant: string): TenantId {
  const id = createHash('sha256').update(`kvfabric.tenant.v1\0${tenant}`).digest().readUInt32BE(0);
  return id === 0 ? 1 : id;
}

export class TenantRegistry {
  /** Assigned ids never change: each process asks the directory once per name. */
  private readonly known = new Map<string, TenantId>();

  private constructor(private readonly directory: string) {}

  static async open(directory: string): Promise<TenantRegistry> {
    await openPrivateDirectory(directory, 'the tenant registry');
    await removeStaleTempFilesIn(directory, STALE_TEMP_AGE_MS);
    return new TenantRegistry(directory);
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

  private fileOf(id: TenantId): string {
    return join(this.directory, id.toString(16).padStart(8, '0'));
  }

  private async ownerOf(id: TenantId): Promise<string | undefined> {
    try {
      return await fsp.readFile(this.fileOf(id), 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw new FabricError('UNAVAILABLE', `tenant registry ${this.directory}: ${(err as Error).message}`);
    }
  }

  /** Links a complete, synced temp file to the id's name; returns whoever owns the id afterwards. */
  private async claim(id: TenantId, tenant: string): Promise<string | undefined> {
    const temp = join(this.directory, tempFileName(randomBytes(6).toString('hex')));
    try {
      const file = await fsp.open(temp, 'wx', PRIVATE_FILE_MODE);
      try {
        await file.writeFile(tenant);
        await file.sync();
      } finally {
        await file.close();
      }
      await fsp.link(temp, this.fileOf(id));
      await syncDirectory(this.directory, `the tenant registry in ${this.directory}`);
      return tenant;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'EEXIST') return this.ownerOf(id); // someone linked first
      throw err instanceof FabricError
        ? err
        : new FabricError('UNAVAILABLE', `tenant registry ${this.directory}: ${(err as Error).message}`);
    } finally {
      await fsp.rm(temp, { force: true });
    }
  }
}
