// The cold tier in a blob store (an S3 bucket; any BlobStore), for workers that share nothing but it. A
// segment is one create-only put (its id is random: a taken key is a bug or an attack, never
// overwritten), streamed as it is sealed: the S3 backend sends a big one as a multipart upload whose
// parts go up while later blocks are still on the crypto threads, and completes it under the condition.
// Reads are ranged GETs of the header (the first, which also says the segment's size), then of each run
// of blocks the caller wants, never the whole segment. Manifests take the caller's condition (cold-store:
// If-None-Match for a context's first, If-Match on the version the writer read for the next), so a
// fenced-off writer's late write is refused by the store itself. The store only ever sees ciphertext.
import { isPreconditionFailed } from '../../blob-store/blob-errors';
import { readBounded } from '../../blob-store/bounded-read';
import { readRangeInto, readStartInto } from '../../blob-store/ranged-read-into';
import { hasIncompleteUploads } from '../../blob-store/s3/incomplete-uploads';
import { bufferedPut, hasStreamedPuts } from '../../blob-store/streamed-put';
import { FabricError, isFabricError } from '../../fabric/errors';
import type { BlobCondition, BlobStore, BlobVersion } from '../../blob-store/blob-store';
import {
  contextIdOfKey,
  MANIFEST_LOG_PREFIX,
  MANIFESTS_PREFIX,
  manifestKey,
  SEGMENTS_PREFIX,
  segmentIdOfKey,
  segmentKey,
} from './cold-blob-keys';
import type { ColdStorage, SegmentSink, SegmentSource, StoredManifest } from './cold-storage';
import { MAX_MANIFEST_FILE_BYTES } from './manifest-file';
import { ManifestLogStore } from './manifest-log-store';
import { HEADER_PROBE_BYTES } from './segment-header';
import { SLOT_BYTES } from './staging-arena';

export class BlobColdStorage implements ColdStorage {
  readonly versioned = true;
  /**
   * When this process first listed each segment: a blob store's clock is not ours, so a segment's age is
   * at least the time since we first saw it, never more (orphanSegments' minAgeMs errs towards keeping).
   */
  private readonly firstSeen = new Map<string, number>();

  readonly log: ManifestLogStore;

  constructor(private readonly store: BlobStore) {
    this.log = new ManifestLogStore(store, MANIFEST_LOG_PREFIX);
  }

  async writeSegment(
    segmentId: string,
    size: number,
    what: string,
    _wantDirect: boolean,
    fill: (sink: SegmentSink) => Promise<void>,
  ): Promise<void> {
    const key = segmentKey(segmentId);
    // Parts go up while later blocks are still being sealed (S3: a multipart upload); a store that takes
    // no parts gets the segment assembled in memory, zeroed, so the header's padding is zeros either way.
    const upload = await (hasStreamedPuts(this.store)
      ? this.store.startPut(key, size, { ifNoneMatch: '*' })
      : Promise.resolve(bufferedPut(this.store, key, size, { ifNoneMatch: '*' }))
    ).catch((err: unknown) => {
      throw named(err, what);
    });
    try {
      await fill({ direct: false, write: (part, offset) => upload.write(part, offset) });
      await upload.complete();
    } catch (err) {
      await upload.abort();
      throw named(err, what);
    }
  }

  async openSegment(segmentId: string, where: string): Promise<SegmentSource | undefined> {
    const key = segmentKey(segmentId);
    // The header's first bytes and the segment's size in one request: no HEAD before it.
    const start = Buffer.alloc(HEADER_PROBE_BYTES);
    const opened = await readStartInto(this.store, key, start);
    if (opened === undefined) return undefined;
    const { head } = opened;
    const read = async (into: Uint8Array, offset: number): Promise<number> => {
      const length = Math.min(into.byteLength, head.size - offset);
      if (length <= 0) return 0;
      // Straight into the caller's memory (a staging slot) where the store can (S3): no buffer per run.
      const got = await readRangeInto(this.store, key, offset, into.subarray(0, length)).catch((err: unknown) => {
        // Shorter than when it was looked at: replaced or cut since, which the reader reports as truncated.
        if (isFabricError(err, 'OUT_OF_RANGE')) return 'short' as const;
        throw err;
      });
      if (got === undefined) throw new FabricError('INTEGRITY', `${where}: segment blob vanished while it was read`);
      return got === 'short' ? 0 : length;
    };
    return {
      size: head.size,
      start: start.subarray(0, opened.bytes),
      read,
      // Slots are shared memory: a run read into one goes to the crypto threads without a copy.
      blockReader: async (blockBytes) => ({ staged: blockBytes <= SLOT_BYTES, read }),
      close: async () => undefined,
    };
  }

  async deleteSegment(segmentId: string): Promise<void> {
    await this.store.delete(segmentKey(segmentId));
    this.firstSeen.delete(segmentId);
  }

  async listSegments(): Promise<string[]> {
    const ids = (await this.store.list(SEGMENTS_PREFIX))
      .map((head) => segmentIdOfKey(head.key))
      .filter((id): id is string => id !== undefined);
    const now = Date.now();
    const listed = new Set(ids);
    for (const id of ids) if (!this.firstSeen.has(id)) this.firstSeen.set(id, now);
    for (const id of this.firstSeen.keys()) if (!listed.has(id)) this.firstSeen.delete(id);
    return ids;
  }

  async olderThan(segmentIds: string[], minAgeMs: number): Promise<string[]> {
    const now = Date.now();
    return segmentIds.filter((id) => now - (this.firstSeen.get(id) ?? now) >= minAgeMs);
  }

  /** Segment uploads a killed writer left incomplete (S3's multipart uploads); none on a store without them. */
  async abortIncompleteUploads(minAgeMs: number): Promise<number> {
    return hasIncompleteUploads(this.store) ? this.store.abortIncompleteUploads(SEGMENTS_PREFIX, minAgeMs) : 0;
  }

  async writeManifest(contextId: string, bytes: Buffer, what: string, condition?: BlobCondition): Promise<BlobVersion> {
    return this.store.put(manifestKey(contextId), bytes, condition).catch((err: unknown) => {
      throw named(err, what);
    });
  }

  async readManifest(contextId: string, where: string): Promise<StoredManifest | undefined> {
    const read = await readBounded(this.store, manifestKey(contextId), MAX_MANIFEST_FILE_BYTES, `${where}: manifest`);
    return read && { bytes: read.bytes, version: read.version };
  }

  async hasManifest(contextId: string): Promise<boolean> {
    return (await this.store.head(manifestKey(contextId))) !== undefined;
  }

  async manifestVersion(contextId: string): Promise<BlobVersion | undefined> {
    return (await this.store.head(manifestKey(contextId)))?.version;
  }

  async deleteManifest(contextId: string, what: string, condition?: { readonly ifMatch: BlobVersion }): Promise<void> {
    await this.store.delete(manifestKey(contextId), condition).catch((err: unknown) => {
      throw named(err, what);
    });
  }

  async listManifests(): Promise<string[]> {
    return (await this.store.list(MANIFESTS_PREFIX)).map((head) => contextIdOfKey(head.key)).filter((id): id is string => id !== undefined);
  }
}

/** The store's error with what the tier was doing in front; a refused condition keeps its class. */
function named(err: unknown, what: string): unknown {
  if (!(err instanceof FabricError) || isPreconditionFailed(err)) return err;
  return new FabricError(err.code, `${what}: ${err.message}`);
}
