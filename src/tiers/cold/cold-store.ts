// The disk tier of the KV-cache tiers: encrypted, checksummed, crash-safe segment and manifest files in
// one directory, possibly a shared mount, from which any process holding the master key restores a
// context after the process that wrote it died. Layout, formats and guarantees: docs/cold-tier.md.
//
// The store owns a crypto thread pool and a directory; it does not decide what moves when (the tier
// orchestration does). Every failure is a FabricError; nothing here throws anything else or crashes the
// process, and no message carries key material.

import { promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import zlib from 'node:zlib';

import { FabricError } from '../../fabric/errors';
import { forEachBounded, Limiter } from './bounded-parallel';
import { syncDirectory, writeAtomically } from '../../blob-store/posix/durable-file';
import { errnoOf, ioError } from '../../blob-store/posix/io-errors';
import { readRegularFile } from '../../blob-store/posix/regular-file';
import { isTempFile, STALE_TEMP_AGE_MS } from '../../blob-store/posix/temp-files';
import { prepareDirectory, removeStaleTempFiles, segmentFileName, segmentIdOfFile, type ColdDirectory } from './cold-directory';
import { contextIdOfManifestFile, manifestFileName } from './context-names';
import { CryptoPool } from './crypto-pool';
import { directIoWorks } from './direct-io';
import { KeyRing } from './key-ring';
import { MAX_MANIFEST_FILE_BYTES, openManifest, sealManifest } from './manifest-file';
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
  /** Created if missing. May be shared by several processes and machines. */
  directory: string;
  keyRing: KeyRing;
  /** Crypto worker threads, 1 to 64; default min(2, CPUs). */
  cryptoThreads?: number;
  /**
   * Temp files older than this are removed by open() whoever wrote them (default one hour). Temp files of
   * dead processes on this machine are removed at any age.
   */
  staleTempAgeMs?: number;
  /**
   * Write and read segment blocks with O_DIRECT where the file system supports it and blocks are 4 KiB
   * multiples (default true). Saves the kernel's page-cache copy of every byte; off uses the page cache.
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

  private constructor(
    private readonly directory: ColdDirectory,
    private ring: KeyRing,
    private readonly crypto: CryptoPool,
    private readonly directIo: boolean,
  ) {
    this.jobs = new Limiter(crypto.size * JOBS_PER_THREAD + 1);
  }

  /** What segment writes and reads need: the key ring as it is now (rotation replaces it). */
  private segmentContext(): SegmentContext {
    return { directory: this.directory, keyRing: this.ring, crypto: this.crypto, jobs: this.jobs, directIo: this.directIo };
  }

  /** Creates the directory if needed and removes stale temp files of crashed writers. */
  static async open(options: ColdStoreOptions): Promise<ColdStore> {
    if (typeof options !== 'object' || options === null) throw new FabricError('INVALID_ARGUMENT', 'options must be an object');
    const {
      directory,
      keyRing,
      cryptoThreads = Math.min(2, os.availableParallelism()),
      staleTempAgeMs = STALE_TEMP_AGE_MS,
      directIo = true,
      inPlaceCrypto = true,
    } = options;
    if (typeof directory !== 'string' || directory.length === 0)
      throw new FabricError('INVALID_ARGUMENT', `directory must be a non-empty path, got ${describe(directory)}`);
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
    const dir = await prepareDirectory(directory);
    await removeStaleTempFiles(dir, staleTempAgeMs);
    const direct = directIo && (await directIoWorks(dir.segments));
    return new ColdStore(dir, keyRing, new CryptoPool(cryptoThreads, inPlaceCrypto), direct);
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
   * into one new segment file, written atomically, and returns a ref per block. Array blocks must stay
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

  /** Removes a segment file; removing one that is already gone is not an error. */
  deleteSegment(segmentId: string): Promise<void> {
    return this.track(async () => {
      const id = checkSegmentId(segmentId);
      await fsp.rm(path.join(this.directory.segments, segmentFileName(id)), { force: true }).catch((err: unknown) => {
        throw ioError(err, `deleting segment ${id}`);
      });
    });
  }

  /** Writes (or atomically replaces) the manifest of `manifest.contextId`. */
  writeManifest(manifest: ContextManifest): Promise<void> {
    return this.track(async () => {
      const checked = checkManifest(manifest);
      const bytes = await sealManifest(checked, this.ring, this.crypto);
      const what = `writing the manifest of context '${checked.contextId}' (version ${checked.version})`;
      await writeAtomically(this.directory.manifests, manifestFileName(checked.contextId), what, async (file) => {
        await file.writeFile(bytes);
      });
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
      const manifest = await this.loadManifest(id);
      if (manifest === undefined) throw new FabricError('INTEGRITY', `context '${id}': manifest is missing from the cold tier`);
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
    return this.track(async () => {
      const file = path.join(this.directory.manifests, manifestFileName(checkContextId(contextId)));
      try {
        await fsp.stat(file);
        return true;
      } catch (err) {
        if (errnoOf(err) === 'ENOENT') return false;
        throw ioError(err, `looking for the manifest of context '${contextId}'`);
      }
    });
  }

  /** Removes a context's manifest (durably: it must not reappear after a crash once its segments are gone). */
  deleteManifest(contextId: string): Promise<void> {
    return this.track(async () => {
      const id = checkContextId(contextId);
      const what = `deleting the manifest of context '${id}'`;
      await fsp.rm(path.join(this.directory.manifests, manifestFileName(id)), { force: true }).catch((err: unknown) => {
        throw ioError(err, what);
      });
      await syncDirectory(this.directory.manifests, what);
    });
  }

  /** Context ids with a manifest, sorted. */
  listManifests(): Promise<string[]> {
    return this.track(async () => {
      const names = await this.listFolder(this.directory.manifests);
      return names
        .map(contextIdOfManifestFile)
        .filter((id): id is string => id !== undefined)
        .sort();
    });
  }

  /** Ids of every segment file, sorted. */
  listSegments(): Promise<string[]> {
    return this.track(async () => {
      const names = await this.listFolder(this.directory.segments);
      return names
        .map(segmentIdOfFile)
        .filter((id): id is string => id !== undefined)
        .sort();
    });
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
      const segments = (await this.listFolder(this.directory.segments)).map(segmentIdOfFile).filter((id): id is string => id !== undefined);
      const contexts = (await this.listFolder(this.directory.manifests))
        .map(contextIdOfManifestFile)
        .filter((id): id is string => id !== undefined);
      const referenced = new Set<string>();
      await forEachBounded(contexts, new Limiter(MANIFEST_READS), async (contextId) => {
        const manifest = await this.loadManifest(contextId);
        for (const page of manifest?.pages ?? []) referenced.add(page.segmentId);
      });
      const now = Date.now();
      const orphans: string[] = [];
      for (const id of segments.filter((s) => !referenced.has(s))) {
        if (minAgeMs > 0) {
          const stat = await fsp.stat(path.join(this.directory.segments, segmentFileName(id))).catch(() => undefined);
          if (stat === undefined || now - stat.mtimeMs < minAgeMs) continue;
        }
        orphans.push(id);
      }
      return orphans.sort();
    });
  }

  /** Waits for operations in flight, then stops the crypto threads. Later calls are INVALID_STATE. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await Promise.allSettled([...this.inFlight]);
    await this.crypto.close();
  }

  /** The manifest, or undefined when there is none (a concurrent delete included). */
  private async loadManifest(contextId: string): Promise<ContextManifest | undefined> {
    const file = path.join(this.directory.manifests, manifestFileName(contextId));
    const bytes = await readRegularFile(file, `context '${contextId}': manifest file`, MAX_MANIFEST_FILE_BYTES);
    return bytes === undefined ? undefined : openManifest(bytes, contextId, this.ring, this.crypto);
  }

  private async listFolder(folder: string): Promise<string[]> {
    try {
      return (await fsp.readdir(folder)).filter((name) => !isTempFile(name));
    } catch (err) {
      throw ioError(err, `listing ${folder}`);
    }
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
