// Per-context revocation: the lowest epoch a worker still accepts for a context. Release and hand-off
// raise it past the epoch of the token that did them, revoking every token minted before. Kept in the
// directory all workers share (next to the grants), one small file per context written atomically, and
// kept after release: a replayed token of a released context stays refused.
import { createHash } from 'node:crypto';
import { mkdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';

import { FabricError } from '../fabric/errors';
import { writeAtomically } from '../tiers/cold/durable-file';

export class EpochStore {
  private constructor(private readonly directory: string) {}

  static async open(directory: string): Promise<EpochStore> {
    await mkdir(directory, { recursive: true });
    return new EpochStore(directory);
  }

  /** 0 for a context never revoked. Read every time: another worker may have raised it. */
  async minimum(contextId: string): Promise<number> {
    let text: string;
    try {
      text = await readFile(this.fileOf(contextId), 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return 0;
      throw new FabricError('UNAVAILABLE', `epoch of context ${contextId}: ${(err as Error).message}`);
    }
    const record = parseRecord(text);
    if (!record || record.contextId !== contextId) throw new FabricError('INTEGRITY', `epoch file of context ${contextId} is malformed`);
    return record.minimum;
  }

  /** Revokes every token of the context with an epoch below `minimum`; never lowers the record. */
  async raise(contextId: string, minimum: number): Promise<void> {
    if (minimum <= (await this.minimum(contextId))) return;
    await writeAtomically(this.directory, this.nameOf(contextId), `the epoch of context ${contextId}`, (file) =>
      file.writeFile(JSON.stringify({ contextId, minimum })),
    );
  }

  private fileOf(contextId: string): string {
    return join(this.directory, this.nameOf(contextId));
  }

  private nameOf(contextId: string): string {
    return `${createHash('sha256').update(contextId).digest('hex').slice(0, 40)}.epoch.json`;
  }
}

function parseRecord(text: string): { contextId: string; minimum: number } | undefined {
  try {
    const { contextId, minimum } = JSON.parse(text) as Record<string, unknown>;
    return typeof contextId === 'string' && Number.isSafeInteger(minimum) ? { contextId, minimum: minimum as number } : undefined;
  } catch {
    return undefined;
  }
}
