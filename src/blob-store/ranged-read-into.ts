// A ranged read straight into the caller's memory: the cold tier reads each run of blocks into a staging
// slot, which its crypto threads then decrypt in place. A store that streams a response (S3) copies each
// chunk there as it arrives, with no buffer per read: a read through get() makes one for the whole range,
// and its S3 client two (the chunks joined, then wrapped), each copied once more into the slot, and on a
// 2-core machine those copies and their garbage cost as much main-thread time as the download itself. Any
// other store gets the range from get() and one copy (readRangeInto).
import type { BlobHead, BlobStore } from './blob-store';

/** A blob store that reads a range into memory the caller gives (the S3 backend). */
export interface RangedReadsInto {
  /**
   * Bytes [offset, offset + into.byteLength) of the blob, written into `into`; returns its size and
   * version, or undefined when there is no such key. OUT_OF_RANGE when the range lies past its end, as
   * get() with a range; `into` is then partly written.
   */
  getInto(key: string, offset: number, into: Uint8Array): Promise<BlobHead | undefined>;
}

export function hasRangedReadsInto(store: object): store is RangedReadsInto {
  return typeof (store as Partial<RangedReadsInto>).getInto === 'function';
}

/** The range into `into` through getInto where the store has it, else through get() and one copy. */
export async function readRangeInto(store: BlobStore, key: string, offset: number, into: Uint8Array): Promise<BlobHead | undefined> {
  if (hasRangedReadsInto(store)) return store.getInto(key, offset, into);
  const read = await store.get(key, { offset, length: into.byteLength });
  if (read === undefined) return undefined;
  into.set(read.bytes);
  return { key, size: read.size, version: read.version };
}
