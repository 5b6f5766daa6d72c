// The storage seam: everything the shared tier keeps (cold segments and manifests, and later the records
// that decide access) is a blob under a key, in a POSIX directory or an S3 bucket. Bytes and conditional
// writes live below this seam; encryption, checksums and the ledger live above it, so a backend only ever
// sees ciphertext. The conditions are the fences: a create-only put has exactly one winner among any
// number of racing writers, and a replace-only-this-version put fails for every holder but the one whose
// version is still current. A refused condition is a PreconditionFailed (blob-errors.ts), never a silent
// overwrite.

/** A backend's opaque name for one written state of a key: equal versions mean the same write. */
export type BlobVersion = string;

/** When a put or delete may happen: only if the key is absent, or only if it is at this version. */
export type BlobCondition = { readonly ifNoneMatch: '*' } | { readonly ifMatch: BlobVersion };

/** Bytes [offset, offset + length) of a blob; the whole range must lie inside it. */
export interface ByteRange {
  readonly offset: number;
  readonly length: number;
}

export interface BlobHead {
  readonly key: string;
  readonly size: number;
  readonly version: BlobVersion;
}

export interface BlobRead extends BlobHead {
  /** The whole blob, or the range asked for. */
  readonly bytes: Buffer;
}

/**
 * One store of blobs. Keys are `/`-separated segments of [A-Za-z0-9._-] that do not start with a dot
 * (blob-keys.ts); anything else is INVALID_ARGUMENT before the store is touched. A store that cannot be
 * reached is UNAVAILABLE (retry later), a full one STORAGE_FULL, and a stored object the backend cannot
 * vouch for (a link or a device in a directory) INTEGRITY. No error message carries a credential.
 */
export interface BlobStore {
  /** Where the blobs are, for messages and logs: a file:// or s3:// URL, never with credentials. */
  readonly location: string;
  /**
   * Writes `bytes` under `key`, whole or not at all, and returns the new version. With `ifNoneMatch: '*'`
   * only when the key is absent; with `ifMatch` only when its current version is that one; otherwise
   * PreconditionFailed and nothing written.
   */
  put(key: string, bytes: Uint8Array, condition?: BlobCondition): Promise<BlobVersion>;
  /** The blob (or `range` of it) and its version; undefined when there is none. OUT_OF_RANGE past its end. */
  get(key: string, range?: ByteRange): Promise<BlobRead | undefined>;
  /** Size and version without the bytes; undefined when there is none. */
  head(key: string): Promise<BlobHead | undefined>;
  /** Every blob whose key starts with `prefix` (plain string prefix, as in S3), in key order. */
  list(prefix: string): Promise<BlobHead[]>;
  /**
   * Removes the blob; false when there was none. With `ifMatch`, only that version (PreconditionFailed
   * otherwise, also when there is none).
   */
  delete(key: string, condition?: { readonly ifMatch: BlobVersion }): Promise<boolean>;
  /** Releases connections; the store is unusable after. */
  close(): Promise<void>;
}
