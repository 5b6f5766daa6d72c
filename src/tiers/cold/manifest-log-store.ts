// Where a context's manifest-log records live: `<root><context key path>/<sequence>.rec` in a blob store
// (the bucket's `cold/manifest-log/`, or a directory's `manifest-log/` through the POSIX store). A record is
// created once at its sequence number (If-None-Match, link(2) in a directory): of any writers racing for
// one number exactly one wins, the others get PreconditionFailed. The store sees only sealed bytes.
import type { BlobStore } from '../../blob-store/blob-store';
import { readBounded } from '../../blob-store/bounded-read';
import { contextKeyPath } from './cold-blob-keys';
import { MAX_MANIFEST_FILE_BYTES } from './manifest-file';

const RECORD = /^(\d{16})\.rec$/;

/** The store, made on the first write (`create`) where it may not exist yet; undefined: none yet, so no records. */
export type LogStoreOpener = (create: boolean) => Promise<BlobStore | undefined>;

export class ManifestLogStore {
  private readonly storeFor: LogStoreOpener;

  constructor(
    store: BlobStore | LogStoreOpener,
    private readonly root: string,
  ) {
    this.storeFor = typeof store === 'function' ? store : async () => store;
  }

  /** Creates record `sequence` of `contextId`; PreconditionFailed when that number is taken. */
  async create(contextId: string, sequence: number, bytes: Buffer): Promise<void> {
    const store = (await this.storeFor(true))!;
    await store.put(this.key(contextId, sequence), bytes, { ifNoneMatch: '*' });
  }

  /** The sealed bytes of a record, undefined when there is none. */
  async read(contextId: string, sequence: number, where: string): Promise<Buffer | undefined> {
    const store = await this.storeFor(false);
    if (store === undefined) return undefined;
    return (await readBounded(store, this.key(contextId, sequence), MAX_MANIFEST_FILE_BYTES, where))?.bytes;
  }

  /** Sequence numbers of the context's records, ascending. */
  async list(contextId: string): Promise<number[]> {
    const store = await this.storeFor(false);
    if (store === undefined) return [];
    const prefix = this.prefix(contextId);
    return (await store.list(prefix))
      .map((head) => RECORD.exec(head.key.slice(prefix.length))?.[1])
      .filter((digits): digits is string => digits !== undefined)
      .map(Number)
      .sort((a, b) => a - b);
  }

  /** Removing one that is already gone is not an error. */
  async delete(contextId: string, sequence: number): Promise<void> {
    await (await this.storeFor(false))?.delete(this.key(contextId, sequence));
  }

  private prefix(contextId: string): string {
    return `${this.root}${contextKeyPath(contextId)}/`;
  }

  private key(contextId: string, sequence: number): string {
    return `${this.prefix(contextId)}${String(sequence).padStart(16, '0')}.rec`;
  }
}
