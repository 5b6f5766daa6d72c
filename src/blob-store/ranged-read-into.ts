// A ranged read straight into the caller's memory: the cold tier reads each run of blocks into a staging
// slot, which its crypto threads then decrypt in place. A store that streams a response (S3) copies each
// chunk there as it arrives, with no buffer per read: a read through get() makes one for the whole range,
// and its S3 client two (the chunks joined, then wrapped), each copied once more into the slot, and on a
// 2-core machine those copies and their garbage cost as much main-thread time as the download itself. Any
// other store gets the range from get() and one copy (readRangeInto). Opening a blob reads its first bytes
// and learns its size in the same request (readStartInto): a segment's header, a manifest, a log record.
import { checkRange } from './blob-keys';
import type { BlobHead, BlobStore } from './blob-store';

/** A blob store that reads a range into memory the caller gives (the S3 backend). */
export interface RangedReadsInto {
  /**
   * Bytes [offset, offset + into.byteLength) of the blob, written into `into`; returns its size and
   * version, or undefined when there is no such key. OUT_OF_RANGE when the range lies past its end, as
   * get() with a range; `into` is then partly written.
   */
  getInto(key: string, offset: number, into: Uint8Array): Promise<BlobHead | undefined>;
  /**
   * The blob's first bytes, as many as `into` holds or the blob has, with its size and version, in one
   * request; undefined when there is no such key.
   */
  getStartInto(key: string, into: Uint8Array): Promise<BlobStart | undefined>;
}

/** A blob's size and version, and how many of its first bytes were written into the caller's memory. */
export interface BlobStart {
  readonly head: BlobHead;
  readonly bytes: number;
}

export function hasRangedReadsInto(store: object): store is RangedReadsInto {
  const into = store as Partial<RangedReadsInto>;
  return typeof into.getInto === 'function' && typeof into.getStartInto === 'function';
}

/** The range into `into` through getInto where the store has it, else through get() and one copy. */
export async function readRangeInto(store: BlobStore, key: string, offset: number, into: Uint8Array): Promise<BlobHead | undefined> {
  if (hasRangedReadsInto(store)) return store.getInto(key, offset, into);
  const read = await store.get(key, { offset, length: into.byteLength });
  if (read === undefined) return undefined;
  into.set(read.bytes);
  return { key, size: read.size, version: read.version };
}

/**
 * The blob's first bytes into `into` (as many as fit or it has), its size and version: one request where
 * the store reads into memory (S3, where a HEAD first would be a second round trip), else head and get.
 */
export async function readStartInto(store: BlobStore, key: string, into: Uint8Array): Promise<BlobStart | undefined> {
  if (hasRangedReadsInto(store)) return store.getStartInto(key, into);
  checkRange({ offset: 0, length: into instanceof Uint8Array ? into.byteLength : Number.NaN });
  const head = await store.head(key);
  if (head === undefined) return undefined;
  const length = Math.min(into.byteLength, head.size);
  if (length === 0) return { head, bytes: 0 };
  const read = await store.get(key, { offset: 0, length });
  if (read === undefined) return undefined;
  into.set(read.bytes);
  return { head: { key, size: read.size, version: read.version }, bytes: read.bytes.byteLength };
}
