// Grants live beside the cold tier, in a directory every worker reaches, so a worker that adopts a
// context after another one died can still check who may touch it. One small JSON file per context,
// written to a temp name, synced and renamed, so readers never see half a grant. A grant names the
// context's tenant and owning agent and holds no secret: capabilities are checked against it (capability.ts).
import { createHash } from 'node:crypto';
import { mkdir, readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';

import { FabricError } from '../fabric/errors';
import { writeAtomically } from '../tiers/cold/durable-file';
import type { Grant } from './capability';

export class GrantStore {
  private constructor(private readonly directory: string) {}

  static async open(directory: string): Promise<GrantStore> {
    await mkdir(directory, { recursive: true });
    return new GrantStore(directory);
  }

  /** Durable before it returns: the context it guards is durable from its first checkpoint on. */
  async put(grant: Grant): Promise<void> {
    await writeAtomically(this.directory, this.nameOf(grant.contextId), `the grant of context ${grant.contextId}`, (file) =>
      file.writeFile(JSON.stringify(grant)),
    );
  }

  /**
   * The grant of a context; undefined if there is none. Read from the shared directory every time (a
   * small file in the page cache): another worker may have released the context or granted it anew.
   */
  async get(contextId: string): Promise<Grant | undefined> {
    let text: string;
    try {
      text = await readFile(this.fileOf(contextId), 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw new FabricError('UNAVAILABLE', `grant of context ${contextId}: ${(err as Error).message}`);
    }
    const grant = parseGrant(text);
    if (!grant || grant.contextId !== contextId) throw new FabricError('INTEGRITY', `grant file of context ${contextId} is malformed`);
    return grant;
  }

  async delete(contextId: string): Promise<void> {
    await rm(this.fileOf(contextId), { force: true });
  }

  private fileOf(contextId: string): string {
    return join(this.directory, this.nameOf(contextId));
  }

  private nameOf(contextId: string): string {
    // Hashed names: context ids are arbitrary strings, file names are not.
    return `${createHash('sha256').update(contextId).digest('hex').slice(0, 40)}.grant.json`;
  }
}

function parseGrant(text: string): Grant | undefined {
  try {
    const value = JSON.parse(text) as Record<string, unknown>;
    const { contextId, tenant, agentId } = value;
    if (typeof contextId !== 'string' || typeof tenant !== 'string' || typeof agentId !== 'string') return undefined;
    return { contextId, tenant, agentId };
  } catch {
    return undefined;
  }
}
