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
  /** Bounds the crypto jobs (and so the staging slots and bytes) in flight across the store's calls. */
  jobs: Limiter;
}
