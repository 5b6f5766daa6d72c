// One small record per context in the store every worker shares (grants): a JSON body sealed with the
// workers' keys (record-seal.ts), so a record nobody of them wrote is refused. Created once and never
// replaced: the record is put under its key only if the key is absent (If-None-Match: * on S3, a claim of
// the absent key on the POSIX store), so of two workers creating a context's record at once exactly one
// wins, and the other learns whose it is. Read from the store every time, since another worker may
// change it.
import { createHash } from 'node:crypto';

import { isPreconditionFailed } from '../blob-store/blob-errors';
import type { BlobStore } from '../blob-store/blob-store';
import { FabricError } from '../fabric/errors';
import { openRecordPrefix } from './record-prefix';
import type { RecordSeal } from './record-seal';

export class ContextRecords<T extends { contextId: string }> {
  private constructor(
    private readonly store: BlobStore,
    /** Where this kind's records are in the store ("grants/"). */
    private readonly prefix: string,
    /** Names the record kind in keys, seals and errors ("grant"). */
    private readonly kind: string,
    /** The record, or undefined when the parsed JSON is not one. */
    private readonly parse: (value: Record<string, unknown>) => T | undefined,
    private readonly seal: RecordSeal,
  ) {}

  static async open<T extends { contextId: string }>(
    store: BlobStore,
    prefix: string,
    kind: string,
    parse: (value: Record<string, unknown>) => T | undefined,
    seal: RecordSeal,
  ): Promise<ContextRecords<T>> {
    await openRecordPrefix(store, prefix, `the ${kind} directory`);
    return new ContextRecords(store, prefix, kind, parse, seal);
  }

  /** The context's record; undefined if there is none. INTEGRITY (audited) for a blob that is not one sealed for it. */
  async get(contextId: string): Promise<T | undefined> {
    const text = await this.seal.read(this.store, this.keyOf(contextId), this.kind, contextId);
    if (text === undefined) return undefined;
    let record: T | undefined;
    try {
      record = this.parse(JSON.parse(text) as Record<string, unknown>);
    } catch {
      record = undefined;
    }
    if (!record || record.contextId !== contextId)
      throw new FabricError('INTEGRITY', `${this.kind} record of context ${contextId} is malformed`);
    return record;
  }

  /**
   * Creates the context's record unless it has one; durable before it returns. Returns the record on
   * file afterwards: `record` itself, or the one another worker created first (compare them).
   */
  async create(record: T): Promise<T> {
    const bytes = this.seal.seal(this.kind, record.contextId, JSON.stringify(record));
    try {
      await this.store.put(this.keyOf(record.contextId), bytes, { ifNoneMatch: '*' });
      return record;
    } catch (err) {
      if (!isPreconditionFailed(err)) throw err;
    }
    const existing = await this.get(record.contextId);
    if (!existing) throw new FabricError('UNAVAILABLE', `the ${this.kind} of context ${record.contextId} was deleted while it was created`);
    return existing;
  }

  async delete(contextId: string): Promise<void> {
    await this.store.delete(this.keyOf(contextId));
  }

  private keyOf(contextId: string): string {
    // Hashed names: context ids are arbitrary strings, keys are not.
    return `${this.prefix}${createHash('sha256').update(contextId).digest('hex').slice(0, 40)}.${this.kind}.json`;
  }
}
