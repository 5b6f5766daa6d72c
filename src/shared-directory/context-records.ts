// One small record per context in a directory every worker shares (grants): a JSON body sealed with the
// workers' keys (record-seal.ts), so a record nobody of them wrote is refused. Created once and never
// replaced: the record is written complete to a temp file, synced, then linked to its name with link(2),
// which fails when the name exists, atomically on the file server (NFS too). So two workers creating a
// context's record at once cannot overwrite each other: the first one stays, and the second learns whose
// it is. Read from the directory every time, since another worker may change it.
import { createHash } from 'node:crypto';
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';

import { FabricError } from '../fabric/errors';
import { removeStaleTempFilesIn, STALE_TEMP_AGE_MS } from '../blob-store/posix/temp-files';
import { createOnce, syncDirectory } from '../blob-store/posix/durable-file';
import { openPrivateDirectory } from '../blob-store/posix/private-directory';
import type { RecordSeal } from './record-seal';

export class ContextRecords<T extends { contextId: string }> {
  private constructor(
    private readonly directory: string,
    /** Names the record kind in file names, seals and errors ("grant"). */
    private readonly kind: string,
    /** The record, or undefined when the parsed JSON is not one. */
    private readonly parse: (value: Record<string, unknown>) => T | undefined,
    private readonly seal: RecordSeal,
  ) {}

  static async open<T extends { contextId: string }>(
    directory: string,
    kind: string,
    parse: (value: Record<string, unknown>) => T | undefined,
    seal: RecordSeal,
  ): Promise<ContextRecords<T>> {
    await openPrivateDirectory(directory, `the ${kind} directory`);
    await removeStaleTempFilesIn(directory, STALE_TEMP_AGE_MS);
    return new ContextRecords(directory, kind, parse, seal);
  }

  /** The context's record; undefined if there is none. INTEGRITY (audited) for a file that is not one sealed for it. */
  async get(contextId: string): Promise<T | undefined> {
    const text = await this.seal.read(this.fileOf(contextId), this.kind, contextId);
    if (text === undefined) return undefined;
    let record: T | undefined;
    try {
      record = this.parse(JSON.parse(text) as Record<string, unknown>);
    } catch {
      record = undefined;
    }
    if (!record || record.contextId !== contextId)
      throw new FabricError('INTEGRITY', `${this.kind} file of context ${contextId} is malformed`);
    return record;
  }

  /**
   * Creates the context's record unless it has one; durable before it returns. Returns the record on
   * file afterwards: `record` itself, or the one another worker created first (compare them).
   */
  async create(record: T): Promise<T> {
    const bytes = this.seal.seal(this.kind, record.contextId, JSON.stringify(record));
    const created = await createOnce(this.directory, this.fileOf(record.contextId), bytes).catch((err: unknown) => {
      throw this.unavailable(record.contextId, err);
    });
    if (!created) {
      const existing = await this.get(record.contextId);
      if (!existing)
        throw new FabricError('UNAVAILABLE', `the ${this.kind} of context ${record.contextId} was deleted while it was created`);
      return existing;
    }
    await syncDirectory(this.directory, `the ${this.kind} of context ${record.contextId}`);
    return record;
  }

  async delete(contextId: string): Promise<void> {
    await fsp.rm(this.fileOf(contextId), { force: true }).catch((err: unknown) => {
      throw this.unavailable(contextId, err);
    });
  }

  private fileOf(contextId: string): string {
    return join(this.directory, this.nameOf(contextId));
  }

  private nameOf(contextId: string): string {
    // Hashed names: context ids are arbitrary strings, file names are not.
    return `${createHash('sha256').update(contextId).digest('hex').slice(0, 40)}.${this.kind}.json`;
  }

  private unavailable(contextId: string, err: unknown): FabricError {
    return err instanceof FabricError
      ? err
      : new FabricError('UNAVAILABLE', `the ${this.kind} of context ${contextId}: ${(err as Error).message}`);
  }
}
