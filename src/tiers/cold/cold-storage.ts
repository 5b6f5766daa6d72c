// Where the cold tier keeps its bytes: segments and sealed manifests, already encrypted and checksummed
// (cold-store, segment-writer, manifest-file seal them before they get here). Two kinds: a local or
// mounted directory (file-cold-storage: O_DIRECT, temp files and rename, as the tier always did) and any
// blob store (blob-cold-storage: an S3 bucket, whose conditional writes fence a manifest). Neither ever
// sees plaintext or a key.
import type { BlobCondition, BlobVersion } from '../../blob-store/blob-store';
import type { ManifestLogStore } from './manifest-log-store';

/** Where a new segment's bytes go while its blocks are sealed, before it becomes visible whole. */
export interface SegmentSink {
  /** `bytes` at `offset` of the segment; with `direct`, aligned to direct-io's DIRECT_IO_ALIGNMENT. */
  write(bytes: Uint8Array, offset: number): Promise<void>;
  /** Writes must be aligned and come from staging memory (O_DIRECT). */
  readonly direct: boolean;
}

/** One stored segment, open for reading parts of it. */
export interface SegmentSource {
  /** Bytes in the segment as stored: its header says how many there must be. */
  readonly size: number;
  /** Its first bytes where opening it read them already (a blob store's first GET): the header starts there. */
  readonly start?: Buffer;
  /** Fills `into` from `offset`; returns the bytes read, fewer only at the end. */
  read(into: Uint8Array, offset: number): Promise<number>;
  /** How runs of blocks of `blockBytes` are read; asked once per segment, before its runs. */
  blockReader(blockBytes: number): Promise<BlockReader>;
  close(): Promise<void>;
}

/** Reads block runs: into staging slots, decrypted there in place (staged), or into fresh memory. */
export interface BlockReader {
  readonly staged: boolean;
  /** Fills `into` from `offset`; returns the bytes read, fewer only at the end. */
  read(into: Uint8Array, offset: number): Promise<number>;
}

/** A manifest's sealed bytes and the version they are (an ETag, the identity of the file read). */
export interface StoredManifest {
  bytes: Buffer;
  version: BlobVersion;
}

export interface ColdStorage {
  /** Whether manifest writes take a condition (a blob store): then writeManifest returns the new version. */
  readonly versioned: boolean;
  /**
   * Creates segment `segmentId` of `size` bytes from what `fill` writes to the sink, whole or not at all.
   * `wantDirect`: the blocks are of a size O_DIRECT could move (the storage decides whether it does).
   */
  writeSegment(
    segmentId: string,
    size: number,
    what: string,
    wantDirect: boolean,
    fill: (sink: SegmentSink) => Promise<void>,
  ): Promise<void>;
  /** The segment, open; undefined when there is none. */
  openSegment(segmentId: string, where: string): Promise<SegmentSource | undefined>;
  /** Removing one that is already gone is not an error. */
  deleteSegment(segmentId: string): Promise<void>;
  /** Ids of every stored segment, in any order. */
  listSegments(): Promise<string[]>;
  /** Those of `segmentIds` stored at least `minAgeMs` ago, as far as this storage can tell. */
  olderThan(segmentIds: string[], minAgeMs: number): Promise<string[]>;
  /** Writes or replaces a manifest; with a condition (versioned storage) only if it holds. */
  writeManifest(contextId: string, bytes: Buffer, what: string, condition?: BlobCondition): Promise<BlobVersion | undefined>;
  /** A manifest's sealed bytes, undefined when there is none. */
  readManifest(contextId: string, where: string): Promise<StoredManifest | undefined>;
  hasManifest(contextId: string): Promise<boolean>;
  /**
   * Durably: it must not reappear after a crash once its segments are gone. With `condition`, only while
   * its base is that version (PreconditionFailed otherwise, also when there is none): If-Match in a blob
   * store, a comparison just before the unlink in a directory.
   */
  deleteManifest(contextId: string, what: string, condition?: { readonly ifMatch: BlobVersion }): Promise<void>;
  /** Context ids with a manifest, in any order. */
  listManifests(): Promise<string[]>;
  /** The version of a manifest's base as stored now (an ETag, a file's identity); undefined when there is none. */
  manifestVersion(contextId: string): Promise<BlobVersion | undefined>;
  /** Aborts segment uploads left incomplete, at least `minAgeMs` old; absent where writes are never partial objects. */
  abortIncompleteUploads?(minAgeMs: number): Promise<number>;
  /** The manifest-log records written after each base (manifest-log.ts), create-only. */
  readonly log: ManifestLogStore;
}
