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

import { FabricError } from '../../fabric/errors';
import { forEachBounded, Limiter } from './bounded-parallel';
import { PreconditionFailed } from '../../blob-store/blob-errors';
import type { BlobCondition, BlobStore, BlobVersion } from '../../blob-store/blob-store';
import { ioError } from '../../blob-store/posix/io-errors';
import { STALE_TEMP_AGE_MS } from '../../blob-store/posix/temp-files';
import { BlobColdStorage } from './blob-cold-storage';
import type { ColdStorage } from './cold-storage';
import { CryptoPool } from './crypto-pool';
import { FileColdStorage } from './file-cold-storage';
import { KeyRing } from './key-ring';
import { openManifest, sealManifest } from './manifest-file';
import type { SegmentContext } from './segment-context';
import { readBlocks, type DeliverBlock } from './segment-reader';
import { writeSegment } from './segment-writer';
import type {
  BlockSource,
  ColdBlockRef,
  ContextManifest,
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

export class ColdStore {
  private closed = false;
  private readonly inFlight = new Set<Promise<unknown>>();
  private readonly jobs: Limiter;
  /**
   * The stored version of each manifest this store last wrote or was asked to read, with its manifest's
   * version: what a conditional replace (writeManifest's `replaces`) names without reading it again.
   */
  private readonly manifestVersions = new Map<string, { version: number; stored: BlobVersion }>();

  private constructor(
    private readonly storage: ColdStorage,
    private ring: KeyRing,
    private readonly crypto: CryptoPool,
  ) {
    this.jobs = new Limiter(crypto.size * JOBS_PER_THREAD + 1);
  }

  /** What segment writes and reads need: the key ring as it is now (rotation replaces it). */
  private segmentContext(): SegmentContext {
    return { storage: this.storage, keyRing: this.ring, crypto: this.crypto, jobs: this.jobs };
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
   * Writes (or atomically replaces) the manifest of `manifest.contextId`. With `replaces`, in a blob store,
   * only if the stored manifest is still that one (PreconditionFailed, STALE_HANDLE, otherwise); a
   * directory writes regardless.
   */
  writeManifest(manifest: ContextManifest, options: WriteManifestOptions = {}): Promise<void> {
    return this.track(async () => {
      const checked = checkManifest(manifest);
      if (typeof options !== 'object' || options === null) throw new FabricError('INVALID_ARGUMENT', 'options must be an object');
      const { replaces } = options;
      if (replaces !== undefined && replaces !== 'none') checkVersion(replaces, 'replaces');
      const id = checked.contextId;
      const bytes = await sealManifest(checked, this.ring, this.crypto);
      const what = `writing the manifest of context '${id}' (version ${checked.version})`;
      const condition = replaces === undefined || !this.storage.versioned ? undefined : await this.conditionFor(id, replaces);
      const stored = await this.storage.writeManifest(id, bytes, what, condition);
      if (stored !== undefined) this.manifestVersions.set(id, { version: checked.version, stored });
    });
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
      const { manifest, stored } = loaded;
      if (stored !== undefined) this.manifestVersions.set(id, { version: manifest.version, stored });
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

  /** Removes a context's manifest (durably: it must not reappear after a crash once its segments are gone). */
  deleteManifest(contextId: string): Promise<void> {
    return this.track(async () => {
      const id = checkContextId(contextId);
      await this.storage.deleteManifest(id, `deleting the manifest of context '${id}'`);
      this.manifestVersions.delete(id);
    });
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

  /** Waits for operations in flight, then stops the crypto threads. Later calls are INVALID_STATE. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await Promise.allSettled([...this.inFlight]);
    await this.crypto.close();
  }

  /** The manifest and its stored version, or undefined when there is none (a concurrent delete included). */
  private async loadManifest(contextId: string): Promise<{ manifest: ContextManifest; stored?: BlobVersion } | undefined> {
    const read = await this.storage.readManifest(contextId, `context '${contextId}'`);
    if (read === undefined) return undefined;
    return { manifest: await openManifest(read.bytes, contextId, this.ring, this.crypto), stored: read.version };
  }

  /**
   * The condition of a manifest write replacing version `replaces` of the manifest (or none): the stored
   * version this store last saw of that manifest, or, when it saw another or none, the one there now if
   * that is still the version replaced. Otherwise the writer is behind: PreconditionFailed, nothing written.
   */
  private async conditionFor(contextId: string, replaces: number | 'none'): Promise<BlobCondition> {
    if (replaces === 'none') return { ifNoneMatch: '*' };
    const known = this.manifestVersions.get(contextId);
    if (known?.version === replaces) return { ifMatch: known.stored };
    const current = await this.loadManifest(contextId);
    if (current?.stored === undefined || current.manifest.version !== replaces) {
      throw new PreconditionFailed(
        contextId,
        `context '${contextId}': the manifest is no longer version ${replaces} ` +
          `(${current === undefined ? 'it is gone' : `it is version ${current.manifest.version}`}): another writer replaced it`,
      );
    }
    return { ifMatch: current.stored };
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
