// What writing and reading a segment need from the store that owns it, built per call (cold-store.ts,
// segmentContext): the key ring as it is at that moment, since rotation replaces it.
import type { Limiter } from './bounded-parallel';
import type { ColdDirectory } from './cold-directory';
import type { CryptoPool } from './crypto-pool';
import type { KeyRing } from './key-ring';

export interface SegmentContext {
  directory: ColdDirectory;
  keyRing: KeyRing;
  crypto: CryptoPool;
  /** Bounds the crypto jobs (and so the staging slots and bytes) in flight across the store's calls. */
  jobs: Limiter;
  /** The directory's file system takes O_DIRECT I/O. */
  directIo: boolean;
}
