// One small JSON record per context in a directory every worker shares (grants, revocation epochs,
// holder fences): written to a temp name, synced and renamed, so a reader sees the old record or the
// new one, never half of one; read from the directory every time, since another worker may change it.
import { createHash } from 'node:crypto';
import { mkdir, readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';

import { FabricError } from '../fabric/errors';
import { writeAtomically } from '../tiers/cold/durable-file';

export class ContextRecords<T extends { contextId: string }> {
  private constructor(
    private readonly directory: string,
    /** Names the record kind in file names and errors ("grant", "epoch", "fence"). */
    private readonly kind: string,
    /** The record, or undefined when the parsed JSON is not one. */
    private readonly parse: (value: Record<string, unknown>) => T | undefined,
  ) {}

  static async open<T extends { contextId: string }>(directory: string, kind: string, parse: (value: Record<string, unknown>) => T | undefined): Promise<ContextRecords<T>> {
    await mkdir(directory, { recursive: true });
    return new ContextRecords(directory, kind, parse);
  }

  /** The context's record; undefined if there is none. INTEGRITY for a malformed file. */
  async get(contextId: string): Promise<T | undefined> {
    let text: string;
    try {
      text = await readFile(this.fileOf(contextId), 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw new FabricError('UNAVAILABLE', `${this.kind} of context ${contextId}: ${(err as Error).message}`);
    }
    let record: T | undefined;
    try {
      record = this.parse(JSON.parse(text) as Record<string, unknown>);
    } catch {
      record = undefined;
    }
    if (!record || record.contextId !== contextId) throw new FabricError('INTEGRITY', `${this.kind} file of context ${contextId} is malformed`);
    return record;
  }

  /** Durable before it returns. */
  async put(record: T): Promise<void> {
    await writeAtomically(this.directory, this.nameOf(record.contextId), `the ${this.kind} of context ${record.contextId}`, (file) =>
      file.writeFile(JSON.stringify(record)),
    );
  }

  async delete(contextId: string): Promise<void> {
    await rm(this.fileOf(contextId), { force: true });
  }

  private fileOf(contextId: string): string {
    return join(this.directory, this.nameOf(contextId));
  }

  private nameOf(contextId: string): string {
    // Hashed names: context ids are arbitrary strings, file names are not.
    return `${createHash('sha256').update(contextId).digest('hex').slice(0, 40)}.${this.kind}.json`;
  }
}
