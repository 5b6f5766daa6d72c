// What writing and reading a segment need from the store that owns it, built per call (cold-store.ts,
// segmentContext): the key ring as it is at that moment, since rotation replaces it.
import type { Limiter } from './bounded-parallel';
import type { ColdStorage } from './cold-storage';
import type { CryptoPool } from './crypto-pool';
import type { KeyRing } from './key-ring';

export interface SegmentContext {
  /** Where segments are stored: a directory or a blob store. */
  storage: ColdStorage;
  keyRing: KeyRing;
  crypto: CryptoPool;
  /** Bounds a segment write's jobs (copy, seal, write; and so its staging slots) in flight across the store's calls. */
  jobs: Limiter;
  /** Bounds the reads of block runs in flight (ranged GETs, positional reads) across the store's calls. */
  reads: Limiter;
  /**
   * Bounds the read runs being decrypted and delivered across the store's calls. A run takes a slot here
   * before it gives its read slot back (hand over hand), so reads go on while earlier runs decrypt, and a
   * read never stages more runs than both limits together. Its own limiter, not `jobs`: a run that waits
   * here holds a staging slot, and holders of these slots never wait for one, so no cycle can form.
   */
  decrypts: Limiter;
}
