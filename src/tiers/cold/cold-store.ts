// The disk tier of the KV-cache tiers: encrypted, checksummed, crash-safe segments and manifests in one
// directory, possibly a shared mount, or in a blob store (an S3 bucket) that workers on many machines
// share, from which any process holding the master key restores a context after the process that wrote it
// died. Layout, formats and guarantees: docs/cold-tier.md. Sealing and checking stay here; the storage
// (cold-storage.ts) only keeps ciphertext.
//
// The store owns a crypto thread pool and its storage; it does not decide what moves when (the tier
// orchestration does). Every failure is a FabricError; nothing here throws anything else or crashes the
// process, and no message carries key material.

import os from 'node:os';
import zlib from 'node:zlib';

import { FabricError, isFabricError } from '../../fabric/errors';
import { forEachBounded, Limiter, mapBounded } from './bounded-parallel';
import { isPreconditionFailed, PreconditionFailed } from '../../blob-store/blob-errors';
import type { BlobCondition, BlobStore, BlobVersion } from '../../blob-store/blob-store';
import { ioError } from '../../blob-store/posix/io-errors';
import { STALE_TEMP_AGE_MS } from '../../blob-store/posix/temp-files';
import { BlobColdStorage } from './blob-cold-storage';
import type { ColdStorage } from './cold-storage';
import { CryptoPool } from './crypto-pool';
import { FileColdStorage } from './file-cold-storage';
import { KeyRing } from './key-ring';
import { openManifestBase, sealManifest } from './manifest-file';
import { applyRecord, digestOf, openLogRecord, recordOf, sealLogRecord } from './manifest-log';
import type { SegmentContext } from './segment-context';
import { readBlocks, type DeliverBlock } from './segment-reader';
import { writeSegment } from './segment-writer';
import type {
  BlockSource,
  ColdBlockRef,
  ContextManifest,
  DeleteManifestOptions,
  OrphanSegmentOptions,
  ReadManifestOptions,
  SegmentOwner,
  WriteManifestOptions,
  WriteSegmentOptions,
} from './types';
import {
  checkBlockSource,
  checkContextId,
  checkManifest,
  checkOwner,
  checkRef,
  checkSegmentId,
  checkTenant,
  checkStoredManifest,
  checkVersion,
  describe,
} from './validation';

export interface ColdStoreOptions {
  /** A directory, created if missing; may be shared by several processes and machines. Or `store`. */
  directory?: string;
  /**
   * A blob store (an S3 bucket) instead of a directory: segments and manifests under `cold/`, manifests
   * written conditionally (writeManifest's `replaces`). Left open by close(): its opener owns it.
   */
  store?: BlobStore;
  keyRing: KeyRing;
  /** Crypto worker threads, 1 to 64; default min(2, CPUs). */
  cryptoThreads?: number;
  /**
   * A directory's temp files older than this are removed by open() whoever wrote them (default one hour).
   * Temp files of dead processes on this machine are removed at any age.
   */
  staleTempAgeMs?: number;
  /**
   * A directory's segment blocks are written and read with O_DIRECT where the file system supports it
   * and blocks are 4 KiB multiples (default true). Saves the kernel's page-cache copy of every byte; off
   * uses the page cache.
   */
  directIo?: boolean;
  /**
   * AES-GCM in place through the addon's OpenSSL calls where the addon offers them (default true); false
   * keeps to Node's crypto API, which copies every chunk once more. Both write the same files.
   */
  inPlaceCrypto?: boolean;
}

/** Crypto jobs in flight per thread: one running, one queued, so a thread never waits for the disk. */
const JOBS_PER_THREAD = 2;
const MANIFEST_READS = 8;
const RECORD_READS = 8;
/**
 * A new base after this many log records (a read then costs at most this many GETs more), or sooner once
 * the records outgrow the base: a hot turn then writes, on average, at most about twice its own record,
 * whatever the context's length.
 */
export const COMPACT_AFTER_RECORDS = 256;
const KNOWN_LOGS = 1024;
/** Reads of a manifest whose base was compacted while they read its log. */
const LOAD_ATTEMPTS = 4;

/** A manifest as its base and log make it, and what the next write chains to. */
interface ManifestLog {
  manifest: ContextManifest;
  /** The base's stored version (ETag, a file's identity). */
  stored?: BlobVersion;
  baseVersion: number;
  baseBytes: number;
  /** SHA-256 of the last record's sealed bytes (the base's, with none). */
  digest: string;
  records: number;
  recordBytes: number;
}

/** A log read that failed while its base was being replaced: read again (INTEGRITY after a few tries). */
class BaseMoved extends Error {
  constructor(readonly integrity: FabricError) {
    super(integrity.message);
  }
}

/** A write refused because the manifest moved past version `replaces`. */
function behind(contextId: string, replaces: number, why: string): PreconditionFailed {
  return new PreconditionFailed(
    contextId,
    `context '${contextId}': the manifest is no longer version ${replaces} (${why}): another writer replaced it`,
  );
}

/** A storage error with what the tier was doing in front. */
function named(err: unknown, what: string): unknown {
  return err instanceof FabricError ? new FabricError(err.code, `${what}: ${err.message}`) : err;
}

export class ColdStore {
  private closed = false;
  private readonly inFlight = new Set<Promise<unknown>>();
  private readonly jobs: Limiter;
  private readonly reads: Limiter;
  private readonly decrypts: Limiter;
  /**
   * The manifest log of each context this store last wrote or was asked to read: what a conditional
   * replace (writeManifest's `replaces`) chains to and names without reading it again.
   */
  private readonly logs = new Map<string, ManifestLog>();

  private constructor(
    private readonly storage: ColdStorage,
    private ring: KeyRing,
    private readonly crypto: CryptoPool,
  ) {
    this.jobs = new Limiter(crypto.size * JOBS_PER_THREAD + 1);
    // A read keeps as many run reads in flight as a write keeps jobs, while earlier runs decrypt beside them.
    this.reads = new Limiter(crypto.size * JOBS_PER_THREAD + 1);
    this.decrypts = new Limiter(crypto.size * JOBS_PER_THREAD);
  }

  /** What segment writes and reads need: the key ring as it is now (rotation replaces it). */
  private segmentContext(): SegmentContext {
    return { storage: this.storage, keyRing: this.ring, crypto: this.crypto, jobs: this.jobs, reads: this.reads, decrypts: this.decrypts };
  }

  /** Opens the directory (created if needed, stale temp files of crashed writers removed) or the blob store. */
  static async open(options: ColdStoreOptions): Promise<ColdStore> {
    if (typeof options !== 'object' || options === null) throw new FabricError('INVALID_ARGUMENT', 'options must be an object');
    const {
      directory,
      store,
      keyRing,
      cryptoThreads = Math.min(2, os.availableParallelism()),
      staleTempAgeMs = STALE_TEMP_AGE_MS,
      directIo = true,
      inPlaceCrypto = true,
    } = options;
    if ((directory === undefined) === (store === undefined))
      throw new FabricError('INVALID_ARGUMENT', 'give the cold tier a directory or a blob store (store), not both or neither');
    if (directory !== undefined && (typeof directory !== 'string' || directory.length === 0))
      throw new FabricError('INVALID_ARGUMENT', `directory must be a non-empty path, got ${describe(directory)}`);
    if (store !== undefined && (typeof store !== 'object' || store === null || typeof store.put !== 'function'))
      throw new FabricError('INVALID_ARGUMENT', `store must be a BlobStore, got ${describe(store)}`);
    if (!(keyRing instanceof KeyRing)) throw new FabricError('INVALID_ARGUMENT', 'keyRing must be a KeyRing');
    if (!Number.isSafeInteger(cryptoThreads) || cryptoThreads < 1 || cryptoThreads > 64) {
      throw new FabricError('INVALID_ARGUMENT', `cryptoThreads must be an integer in [1, 64], got ${describe(cryptoThreads)}`);
    }
    if (typeof staleTempAgeMs !== 'number' || !(staleTempAgeMs >= 0)) {
      throw new FabricError('INVALID_ARGUMENT', `staleTempAgeMs must be a number >= 0, got ${describe(staleTempAgeMs)}`);
    }
    if (typeof directIo !== 'boolean') throw new FabricError('INVALID_ARGUMENT', `directIo must be a boolean, got ${describe(directIo)}`);
    if (typeof inPlaceCrypto !== 'boolean')
      throw new FabricError('INVALID_ARGUMENT', `inPlaceCrypto must be a boolean, got ${describe(inPlaceCrypto)}`);
    if (typeof zlib.crc32 !== 'function')
      throw new FabricError('UNAVAILABLE', `the cold tier needs Node.js >= 20.15 (zlib.crc32); this is ${process.version}`);
    const storage = store !== undefined ? new BlobColdStorage(store) : await FileColdStorage.open(directory!, staleTempAgeMs, directIo);
    return new ColdStore(storage, keyRing, new CryptoPool(cryptoThreads, inPlaceCrypto));
  }

  get keyRing(): KeyRing {
    return this.ring;
  }

  /** Rotation: later writes wrap with the new ring's active key; reads of older files need their key in it. */
  useKeyRing(keyRing: KeyRing): void {
    this.checkOpen();
    if (!(keyRing instanceof KeyRing)) throw new FabricError('INVALID_ARGUMENT', 'keyRing must be a KeyRing');
    this.ring = keyRing;
  }

  /**
   * Encrypts `blocks` (equal sizes; or a source that copies each block into the store's staging memory)
   * into one new segment, written atomically, and returns a ref per block. Array blocks must stay
   * unchanged until the promise settles.
   */
  writeSegment(owner: SegmentOwner, blocks: Uint8Array[] | BlockSource, options: WriteSegmentOptions = {}): Promise<ColdBlockRef[]> {
    return this.track(async () => {
      const checkedOwner = checkOwner(owner);
      const source = checkBlockSource(blocks);
      const plaintextChecksums = options.plaintextChecksums ?? true;
      if (typeof plaintextChecksums !== 'boolean')
        throw new FabricError('INVALID_ARGUMENT', `plaintextChecksums must be a boolean, got ${describe(plaintextChecksums)}`);
      return writeSegment(this.segmentContext(), checkedOwner, source, plaintextChecksums);
    });
  }

  /**
   * Reads, decrypts and verifies the blocks of `refs` (any segments), in order. A ref of another tenant is
   * PERMISSION_DENIED before any I/O; a block that does not verify is INTEGRITY naming its context. With
   * `deliver`, each block is handed over as it is verified, in staging memory valid only during the call
   * (no buffer per block), and nothing is returned.
   */
  readBlocks(refs: ColdBlockRef[], expectedTenant: number): Promise<Uint8Array[]>;
  readBlocks(refs: ColdBlockRef[], expectedTenant: number, deliver: DeliverBlock): Promise<void>;
  readBlocks(refs: ColdBlockRef[], expectedTenant: number, deliver?: DeliverBlock): Promise<Uint8Array[] | void> {
    return this.track(async () => {
      const tenant = checkTenant(expectedTenant, 'expectedTenant');
      if (!Array.isArray(refs)) throw new FabricError('INVALID_ARGUMENT', `refs must be an array, got ${describe(refs)}`);
      const checked = refs.map((ref: unknown, i) => checkRef(ref, `refs[${i}]`));
      checked.forEach((ref, i) => {
        if (ref.owner.tenant !== tenant) {
          throw new FabricError(
            'PERMISSION_DENIED',
            `refs[${i}] (context '${ref.owner.contextId}') belongs to tenant ${ref.owner.tenant}, not to tenant ${tenant}`,
          );
        }
      });
      if (deliver !== undefined && typeof deliver !== 'function')
        throw new FabricError('INVALID_ARGUMENT', `deliver must be a function, got ${describe(deliver)}`);
      const ctx = this.segmentContext();
      if (deliver !== undefined) return readBlocks(ctx, checked, deliver);
      const out = new Array<Uint8Array>(checked.length);
      if (checked.length > 0) await readBlocks(ctx, checked, (position, bytes) => (out[position] = bytes.slice()));
      return out;
    });
  }

  /** Removes a segment; removing one that is already gone is not an error. */
  deleteSegment(segmentId: string): Promise<void> {
    return this.track(async () => {
      const id = checkSegmentId(segmentId);
      await this.storage.deleteSegment(id).catch((err: unknown) => {
        throw ioError(err, `deleting segment ${id}`);
      });
    });
  }

  /**
   * Writes version `manifest.version` of the manifest of `manifest.contextId`. Without `replaces`, a whole
   * new base, regardless of what is stored. With it, the write lands only if the stored manifest is still
   * version `replaces` ('none': there is none): it claims record `replaces + 1` of the manifest log,
   * create-only, holding what changed since (manifest-log.ts), and checks that the base it chains to is
   * still the stored one; now and then (COMPACT_AFTER_RECORDS, or records outgrowing the base) it then
   * writes the whole manifest as the new base, If-Match on the base it read. Otherwise PreconditionFailed
   * (STALE_HANDLE): another writer got there first, and nothing of this one counts.
   */
  writeManifest(manifest: ContextManifest, options: WriteManifestOptions = {}): Promise<void> {
    return this.track(async () => {
      const checked = checkManifest(manifest);
      if (typeof options !== 'object' || options === null) throw new FabricError('INVALID_ARGUMENT', 'options must be an object');
      const { replaces } = options;
      if (replaces !== undefined && replaces !== 'none') checkVersion(replaces, 'replaces');
      const id = checked.contextId;
      if (replaces === undefined) return this.writeBase(checked, undefined, await this.storage.log.list(id));
      if (replaces === 'none') {
        // Records a deletion left behind (a crash between its steps) would not chain to the new base. In a
        // blob store a context that has a base keeps its records (the create-only put below refuses this
        // write); a directory writes regardless, so its old log goes too.
        const replacing = this.storage.versioned && (await this.storage.manifestVersion(id)) !== undefined;
        if (!replacing) await this.deleteRecords(id, await this.storage.log.list(id));
        return this.writeBase(checked, { ifNoneMatch: '*' }, []);
      }
      const log = await this.logAt(id, replaces);
      const record = recordOf(log.manifest, checked, log.digest);
      if (record === undefined) {
        throw new FabricError(
          'INVALID_ARGUMENT',
          `version ${checked.version} of context '${id}' cannot replace version ${replaces}: ` +
            'it must be the next version, of the same tenant and block layout',
        );
      }
      const sealed = await sealLogRecord(record, this.ring, this.crypto);
      const what = `writing record ${checked.version} of the manifest log of context '${id}'`;
      await this.storage.log.create(id, checked.version, sealed).catch((err: unknown) => {
        throw isPreconditionFailed(err) ? behind(id, replaces, 'another writer took its next version') : named(err, what);
      });
      const appended: ManifestLog = {
        ...log,
        manifest: checked,
        digest: digestOf(sealed),
        records: log.records + 1,
        recordBytes: log.recordBytes + sealed.length,
      };
      if (appended.records >= COMPACT_AFTER_RECORDS || appended.recordBytes > log.baseBytes) {
        const written = (await this.storage.log.list(id)).filter((sequence) => sequence <= checked.version);
        const condition = log.stored === undefined ? undefined : { ifMatch: log.stored };
        const compacted = await this.writeBase(checked, condition, written, log.stored, appended.digest).then(
          () => true,
          (err: unknown) => {
            if (isPreconditionFailed(err)) return this.fencedOff(id, replaces);
            return false; // the record stands; a later write compacts
          },
        );
        if (compacted) return;
      }
      // The record counts only on the base it chains to: a base compacted since (by a newer holder) frees
      // record numbers at or below it, which a late writer could otherwise take unnoticed.
      if ((await this.storage.manifestVersion(id)) !== log.stored) return this.fencedOff(id, replaces);
      this.remember(id, appended);
    });
  }

  /**
   * Refuses a write whose record landed on a base that was replaced since. The record stays: at or below
   * the new base it is never read (the next compaction removes it); above it, another writer may already
   * chain to it.
   */
  private fencedOff(contextId: string, replaces: number): never {
    throw behind(contextId, replaces, 'its base was replaced');
  }

  /**
   * The manifest of `contextId`. INTEGRITY when it is missing, truncated, tampered, another context's, or
   * older than `minVersion`; PERMISSION_DENIED when its key is not in the ring or its tenant is not
   * `expectedTenant`. `hasManifest` asks whether one exists without treating absence as damage.
   */
  readManifest(contextId: string, options: ReadManifestOptions = {}): Promise<ContextManifest> {
    return this.track(async () => {
      const id = checkContextId(contextId);
      if (typeof options !== 'object' || options === null) throw new FabricError('INVALID_ARGUMENT', 'options must be an object');
      const expectedTenant = options.expectedTenant === undefined ? undefined : checkTenant(options.expectedTenant, 'expectedTenant');
      const minVersion = options.minVersion === undefined ? undefined : checkVersion(options.minVersion, 'minVersion');
      const loaded = await this.loadManifest(id);
      if (loaded === undefined) throw new FabricError('INTEGRITY', `context '${id}': manifest is missing from the cold tier`);
      // A copy: the log keeps its own, which the next write chains to.
      const manifest = structuredClone(loaded.manifest);
      if (expectedTenant !== undefined && manifest.tenant !== expectedTenant) {
        throw new FabricError('PERMISSION_DENIED', `context '${id}' belongs to tenant ${manifest.tenant}, not to tenant ${expectedTenant}`);
      }
      if (minVersion !== undefined && manifest.version < minVersion) {
        throw new FabricError(
          'INTEGRITY',
          `context '${id}': manifest version ${manifest.version} is older than the expected ${minVersion} (stale or replayed)`,
        );
      }
      return manifest;
    });
  }

  hasManifest(contextId: string): Promise<boolean> {
    return this.track(async () => this.storage.hasManifest(checkContextId(contextId)));
  }

  /**
   * Removes a context's manifest (durably: it must not reappear after a crash once its segments are gone).
   * With `version`, only that version (DeleteManifestOptions): a stale holder's delete cannot remove the
   * manifest of a worker that took the context over.
   */
  deleteManifest(contextId: string, options: DeleteManifestOptions = {}): Promise<void> {
    return this.track(async () => {
      const id = checkContextId(contextId);
      if (typeof options !== 'object' || options === null) throw new FabricError('INVALID_ARGUMENT', 'options must be an object');
      const version = options.version === undefined ? undefined : checkVersion(options.version, 'version');
      if (version !== undefined) return this.deleteVersion(id, version);
      // Records first: a base without its records is an older version, which minVersion refuses; records
      // without a base are removed by the next first write of the context.
      this.logs.delete(id);
      await this.deleteRecords(id, await this.storage.log.list(id));
      await this.storage.deleteManifest(id, `deleting the manifest of context '${id}'`);
    });
  }

  /**
   * Deletes a manifest that does not verify (a context whose holder is gone, its manifest damaged or
   * missing): the base as stored when it was found damaged, on that version (If-Match; a directory
   * compares its identity just before the unlink), then the records listed then. A base written since (a
   * holder that rewrote it) stays: PreconditionFailed (STALE_HANDLE), nothing deleted. One that verifies is
   * INVALID_STATE: it is deleted by its version (deleteManifest), never as damaged.
   */
  deleteDamagedManifest(contextId: string): Promise<void> {
    return this.track(async () => {
      const id = checkContextId(contextId);
      const what = `deleting the damaged manifest of context '${id}'`;
      // Version and records before the read that finds them damaged: a base replaced after it fails the delete.
      const stored = await this.storage.manifestVersion(id);
      const records = await this.storage.log.list(id);
      const verified = await this.loadManifest(id).then(
        (log) => log !== undefined,
        (err: unknown) => {
          if (isFabricError(err, 'INTEGRITY')) return false;
          throw err;
        },
      );
      if (verified) throw new FabricError('INVALID_STATE', `${what}: it verifies, so it is deleted by its version`);
      this.logs.delete(id);
      if (stored !== undefined) await this.storage.deleteManifest(id, what, { ifMatch: stored });
      await this.deleteRecords(id, records);
    });
  }

  /**
   * Deletes the manifest only while it is `version`. It first claims the next version's record, create-only,
   * as a writer would: a writer that took it first (an adopter's write) refuses the delete, and one still
   * holding `version` can no longer land a write in between. The base then goes on the version read
   * (If-Match; a directory compares its identity first), and its records after it: a base without records
   * is no manifest, and a later first write removes records a crash left.
   */
  private async deleteVersion(id: string, version: number): Promise<void> {
    const current = this.logs.get(id)?.manifest.version === version ? this.logs.get(id) : await this.loadManifest(id);
    if (current === undefined) return;
    if (current.manifest.version !== version) throw behind(id, version, `it is version ${current.manifest.version}`);
    const claim = recordOf(
      current.manifest,
      { ...current.manifest, version: version + 1, createdAt: new Date().toISOString() },
      current.digest,
    );
    const sealed = await sealLogRecord(claim!, this.ring, this.crypto);
    await this.storage.log.create(id, version + 1, sealed).catch((err: unknown) => {
      throw isPreconditionFailed(err)
        ? behind(id, version, 'another writer took its next version')
        : named(err, `deleting the manifest of context '${id}'`);
    });
    this.logs.delete(id);
    const what = `deleting the manifest of context '${id}' (version ${version})`;
    await this.storage
      .deleteManifest(id, what, current.stored === undefined ? undefined : { ifMatch: current.stored })
      .catch(async (err: unknown) => {
        if (!isPreconditionFailed(err)) throw err;
        // A directory's version is its base file's identity, which was seen to change with no newer version
        // written (a load run's release left its manifest). One way that happened is closed: a read paired
        // the identity statted before it with the bytes of a base compacted in between. In case of others:
        // the claimed record fences a directory's writers, so a base read now at this version or older is ours.
        if (this.storage.versioned || !(await this.baseAtMost(id, version))) throw behind(id, version, 'its base was replaced');
        await this.storage.deleteManifest(id, what);
      });
    await this.deleteRecords(id, await this.storage.log.list(id));
  }

  /** Whether the context's base, read now, is at most `version` (false when it is gone or cannot be read). */
  private async baseAtMost(id: string, version: number): Promise<boolean> {
    const base = await this.loadBase(id, `context '${id}'`).catch(() => undefined);
    return base !== undefined && base.manifest.version <= version;
  }

  /** Context ids with a manifest, sorted. */
  listManifests(): Promise<string[]> {
    return this.track(async () => (await this.storage.listManifests()).sort());
  }

  /** Ids of every segment, sorted. */
  listSegments(): Promise<string[]> {
    return this.track(async () => (await this.storage.listSegments()).sort());
  }

  /**
   * Segments no manifest references, sorted: garbage for a collector, or a leak in a test. Reads every
   * manifest; one that cannot be read fails the call, since its segments cannot be told from garbage.
   */
  orphanSegments(options: OrphanSegmentOptions = {}): Promise<string[]> {
    return this.track(async () => {
      const minAgeMs = options?.minAgeMs ?? 0;
      if (typeof minAgeMs !== 'number' || !(minAgeMs >= 0))
        throw new FabricError('INVALID_ARGUMENT', `minAgeMs must be a number >= 0, got ${describe(minAgeMs)}`);
      // Segments first: one written after this listing is not reported, whatever manifest appears later.
      const segments = await this.storage.listSegments();
      const contexts = await this.storage.listManifests();
      const referenced = new Set<string>();
      await forEachBounded(contexts, new Limiter(MANIFEST_READS), async (contextId) => {
        const loaded = await this.loadManifest(contextId);
        for (const page of loaded?.manifest.pages ?? []) referenced.add(page.segmentId);
      });
      const orphans = segments.filter((id) => !referenced.has(id));
      return (minAgeMs > 0 ? await this.storage.olderThan(orphans, minAgeMs) : orphans).sort();
    });
  }

  /**
   * Aborts segment uploads a killed writer left incomplete (S3 multipart uploads: parts stored, no object)
   * started at least minAgeMs ago; returns how many. Nothing to do on a directory.
   */
  abortIncompleteUploads(minAgeMs: number): Promise<number> {
    return this.track(async () => (await this.storage.abortIncompleteUploads?.(minAgeMs)) ?? 0);
  }

  /** Waits for operations in flight, then stops the crypto threads. Later calls are INVALID_STATE. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await Promise.allSettled([...this.inFlight]);
    await this.crypto.close();
  }

  /**
   * The manifest as its base and log make it, or undefined when there is no base (a concurrent delete
   * included). The log is read from the record after the base on, as long as each one follows; a record
   * missing with later ones present, or one that does not chain, is INTEGRITY, unless the base was
   * replaced meanwhile (a compaction): then it is read again.
   */
  private async loadManifest(contextId: string): Promise<ManifestLog | undefined> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.loadOnce(contextId);
      } catch (err) {
        if (!(err instanceof BaseMoved) || attempt >= LOAD_ATTEMPTS) throw err instanceof BaseMoved ? err.integrity : err;
      }
    }
  }

  private async loadOnce(contextId: string): Promise<ManifestLog | undefined> {
    const where = `context '${contextId}'`;
    const known = this.logs.get(contextId);
    let log: ManifestLog | undefined;
    if (known === undefined && this.storage.versioned) {
      // Nothing verified yet, and a read that names the version it read (a blob store): no HEAD before it.
      log = await this.loadBase(contextId, where);
    } else {
      // The base's version before its bytes: a base replaced in between reads as moved, never as current.
      const stored = await this.storage.manifestVersion(contextId);
      if (stored === undefined) return undefined;
      // The same base as this store last verified: only records after what it knows are read.
      log = known?.stored === stored ? known : await this.loadBase(contextId, where);
    }
    if (log === undefined) return undefined;
    const from = log.manifest.version;
    const after = (await this.storage.log.list(contextId)).filter((sequence) => sequence > from);
    const next = after.filter((sequence, i) => sequence === from + 1 + i);
    const sealed = await mapBounded(next, RECORD_READS, (sequence) =>
      this.storage.log.read(contextId, sequence, `${where}: manifest log record ${sequence}`),
    );
    const moved = async (why: string): Promise<never> => {
      const integrity = new FabricError('INTEGRITY', `${where}: manifest log ${why}`);
      throw (await this.storage.manifestVersion(contextId)) === log!.stored ? integrity : new BaseMoved(integrity);
    };
    for (const [i, bytes] of sealed.entries()) {
      const sequence = next[i]!;
      if (bytes === undefined) return moved(`record ${sequence} vanished while it was read`);
      const record = await openLogRecord(bytes, contextId, sequence, this.ring, this.crypto);
      if (record.previous !== log.digest)
        return moved(`record ${sequence} does not follow the record before it (reordered, replayed or planted)`);
      log = {
        ...log,
        manifest: applyRecord(log.manifest, record, `${where}: manifest log record ${sequence}`),
        digest: digestOf(bytes),
        records: log.records + 1,
        recordBytes: log.recordBytes + bytes.length,
      };
    }
    if (after.length > next.length) return moved(`misses record ${from + 1 + next.length} before record ${after[next.length]} (dropped)`);
    if (next.length > 0) log.manifest = checkStoredManifest(log.manifest, contextId);
    this.remember(contextId, log);
    return log;
  }

  /** The base alone, opened; undefined when there is none. */
  private async loadBase(contextId: string, where: string): Promise<ManifestLog | undefined> {
    const read = await this.storage.readManifest(contextId, where);
    if (read === undefined) return undefined;
    const { manifest, logDigest } = await openManifestBase(read.bytes, contextId, this.ring, this.crypto);
    return {
      manifest,
      // The version of the bytes read (a directory's: the identity of the very file read).
      stored: read.version,
      baseVersion: manifest.version,
      baseBytes: read.bytes.length,
      digest: logDigest ?? digestOf(read.bytes),
      records: 0,
      recordBytes: 0,
    };
  }

  /** The log of a manifest that must be at version `replaces`: as this store last wrote or read it, or read now. */
  private async logAt(contextId: string, replaces: number): Promise<ManifestLog> {
    const known = this.logs.get(contextId);
    if (known?.manifest.version === replaces) return known;
    const current = await this.loadManifest(contextId);
    if (current === undefined || current.manifest.version !== replaces)
      throw behind(contextId, replaces, current === undefined ? 'it is gone' : `it is version ${current.manifest.version}`);
    return current;
  }

  /** Writes `manifest` as a whole new base, then removes the records `obsolete` it makes unneeded. */
  private async writeBase(
    manifest: ContextManifest,
    condition: BlobCondition | undefined,
    obsolete: number[],
    replaced?: BlobVersion,
    logDigest?: string,
  ): Promise<void> {
    const id = manifest.contextId;
    const bytes = await sealManifest(manifest, this.ring, this.crypto, logDigest);
    const what = `writing the manifest of context '${id}' (version ${manifest.version})`;
    // A directory takes no condition: its writers are fenced by the holder fences and the log's create-only records.
    const versioned = this.storage.versioned;
    if (!versioned && replaced !== undefined && (await this.storage.manifestVersion(id)) !== replaced) {
      throw new PreconditionFailed(id, `context '${id}': the manifest's base was replaced by another writer`);
    }
    const stored = await this.storage.writeManifest(id, bytes, what, versioned ? condition : undefined);
    this.remember(id, {
      manifest,
      stored: stored ?? (await this.storage.manifestVersion(id)),
      baseVersion: manifest.version,
      baseBytes: bytes.length,
      digest: logDigest ?? digestOf(bytes),
      records: 0,
      recordBytes: 0,
    });
    await this.deleteRecords(id, obsolete).catch(() => undefined);
  }

  /** Best effort beyond the first failure: records at or below a base are never read. */
  private async deleteRecords(contextId: string, sequences: number[]): Promise<void> {
    await forEachBounded(sequences, new Limiter(RECORD_READS), (sequence) => this.storage.log.delete(contextId, sequence));
  }

  /** Keeps the newest KNOWN_LOGS logs: a context not among them is read again before its next write. */
  private remember(contextId: string, log: ManifestLog): void {
    this.logs.delete(contextId);
    this.logs.set(contextId, log);
    if (this.logs.size > KNOWN_LOGS) this.logs.delete(this.logs.keys().next().value!);
  }

  private checkOpen(): void {
    if (this.closed) throw new FabricError('INVALID_STATE', 'the cold store is closed');
  }

  /** Runs an operation so close() can wait for it; argument errors come back as rejections, never throws. */
  private track<T>(operation: () => Promise<T>): Promise<T> {
    if (this.closed) return Promise.reject(new FabricError('INVALID_STATE', 'the cold store is closed'));
    const running = (async () => {
      try {
        return await operation();
      } catch (err) {
        throw err instanceof FabricError
          ? err
          : new FabricError('UNAVAILABLE', `cold tier: unexpected failure: ${(err as Error)?.message ?? String(err)}`);
      }
    })();
    this.inFlight.add(running);
    const forget = () => this.inFlight.delete(running);
    running.then(forget, forget);
    return running;
  }
}
