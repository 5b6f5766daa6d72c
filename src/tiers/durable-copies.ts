// The disk side of the tiers: writing a context's blocks to segment files and a manifest naming them
// (spill), reading them back into frames (fill), adopting a context from its manifest alone, and the
// disk ledger that deletes a segment exactly when nothing uses it any more, here or in any manifest of
// the shared directory. Every method that takes a ContextEntry runs under that context's lock.
import { isPreconditionFailed } from '../blob-store/blob-errors';
import { FabricError, isFabricError } from '../fabric/errors';
import type { NativeAllocator } from '../fabric/native-allocator';
import type { ContextHandle, TenantId } from '../fabric/types';
import type { ColdBlockRef, ColdStore, ContextManifest, ReadManifestOptions } from './cold';
import type { ContextEntry } from './context-registry';
import { namingContext } from './context-errors';
import { DiskLedger } from './disk-ledger';

export interface DurableCopiesOptions {
  pool: NativeAllocator;
  cold: ColdStore;
  /** Blocks per segment file (bounds the memory one spill holds). */
  blocksPerSegment: number;
  /** A segment no manifest names is garbage once this old; younger ones may belong to a spill in flight. */
  orphanMinAgeMs: number;
  onBackgroundError: (what: string, err: unknown) => void;
  /** Asked before every manifest write: false when another process has adopted the context since. */
  mayWriteManifest: (contextId: string) => Promise<boolean>;
}

/** A spill found the context adopted by another process: the caller drops its copy (STALE_HANDLE). */
export class ContextFenced extends Error {}

/** A segment a spill wrote was deleted (a sweep took it for garbage) before the spill committed. */
class SegmentsVanished extends Error {}

export class DurableCopies {
  private readonly pool: NativeAllocator;
  readonly cold: ColdStore;
  private readonly ledger = new DiskLedger();
  private readonly blocksPerSegment: number;
  readonly orphanMinAgeMs: number;
  private readonly onBackgroundError: (what: string, err: unknown) => void;
  private readonly mayWriteManifest: (contextId: string) => Promise<boolean>;
  private readonly gcCandidates = new Set<string>();
  private gc: Promise<void> = Promise.resolve();

  constructor(options: DurableCopiesOptions) {
    this.pool = options.pool;
    this.cold = options.cold;
    this.blocksPerSegment = options.blocksPerSegment;
    this.orphanMinAgeMs = options.orphanMinAgeMs;
    this.onBackgroundError = options.onBackgroundError;
    this.mayWriteManifest = options.mayWriteManifest;
  }

  /**
   * Writes disk copies of every page that lacks one, then a manifest naming them all; returns the blocks
   * written. dropHostFrames frees the host frames of an offloaded context (its pages become disk-only).
   * ContextFenced when another process adopted the context since (no manifest is written).
   */
  async spill(entry: ContextEntry, dropHostFrames: boolean, rewritten = false): Promise<number> {
    const contextId = entry.id;
    const version = entry.version + 1;
    const started = Date.now();
    const { lease, blocks } = this.pool.beginSpill(entry.handle);
    const written: ColdBlockRef[] = [];
    let keys: Float64Array | undefined;
    try {
      const { blockBytes } = this.pool.layout;
      for (let start = 0; start < blocks; start += this.blocksPerSegment) {
        // Each block goes from its frame straight into the store's staging memory, checked against its page
        // checksum on the way; the store adds no checksum of its own (fill checks the pages again).
        const source = {
          count: Math.min(this.blocksPerSegment, blocks - start),
          blockBytes,
          copy: (i: number, target: Uint8Array) => this.pool.spillRead(lease, start + i, target),
        };
        written.push(
          ...(await this.cold.writeSegment({ tenant: entry.tenant, contextId, version }, source, { plaintextChecksums: false })),
        );
      }
      // A slow spill's segments may look like garbage to a sweep by now: check them before the bytes
      // they hold leave memory.
      if (Date.now() - started > this.orphanMinAgeMs / 2) await this.requirePresent(written);
      keys = Float64Array.from(written, (ref) => this.ledger.register(ref));
      this.pool.commitSpill(lease, keys, dropHostFrames);
    } catch (err) {
      this.pool.abortLease(lease);
      // Segments written before the failure have no users: delete them so nothing leaks.
      const orphaned = keys ? this.ledger.forget(keys) : [...new Set(written.map((ref) => ref.segmentId))];
      await this.deleteSegments(orphaned).catch(() => undefined);
      if (err instanceof SegmentsVanished) return this.spillAgain(entry, dropHostFrames, rewritten);
      throw namingContext(err, entry.id);
    }
    const pageKeys = this.pool.pageDiskKeys(entry.handle);
    // Every append leaves a page without a disk copy: none and the same pages is unchanged, keep the version.
    // No block to write but other pages is a spill whose manifest write failed (a store down): write it now.
    if (blocks === 0 && entry.manifest && this.namesPages(entry.manifest, pageKeys)) return 0;
    // Another process removed files our pages still pointed at: the bytes are in memory, write them again.
    if (await this.forgetMissingCopies(entry, pageKeys, written)) return this.spillAgain(entry, dropHostFrames, rewritten);
    if (!(await this.mayWriteManifest(contextId))) throw new ContextFenced();
    const pages = Array.from(pageKeys, (key) => this.ledger.ref(key));
    const layout = this.pool.layout;
    const manifest: ContextManifest = {
      contextId,
      tenant: entry.tenant,
      version,
      tokens: this.pool.contextStats(entry.handle).tokens,
      layout: { bytesPerToken: layout.bytesPerToken, tokensPerBlock: layout.tokensPerBlock, blockBytes: layout.blockBytes },
      pages,
      pageChecksums: Array.from(this.pool.pageChecksums(entry.handle)),
      createdAt: new Date().toISOString(),
      ...(entry.attachment ? { attachment: entry.attachment } : {}),
    };
    // In a blob store only over the manifest this copy last wrote or adopted: a late write of a copy
    // another worker took over since is refused there, as the fence above refuses it here.
    await this.cold.writeManifest(manifest, { replaces: entry.manifest ? entry.version : 'none' }).catch((err: unknown) => {
      throw isPreconditionFailed(err) ? new ContextFenced() : err;
    });
    this.ledger.retainManifest(pages);
    const previous = entry.manifest;
    entry.manifest = pages;
    entry.version = version;
    if (previous) await this.deleteSegments(this.ledger.releaseManifest(previous));
    return blocks;
  }

  /** Whether `manifest` names exactly these pages' disk copies, in order. */
  private namesPages(manifest: readonly ColdBlockRef[], pageKeys: Float64Array): boolean {
    return (
      manifest.length === pageKeys.length &&
      manifest.every((named, i) => {
        const ref = this.ledger.ref(pageKeys[i]!);
        return ref.segmentId === named.segmentId && ref.index === named.index;
      })
    );
  }

  private spillAgain(entry: ContextEntry, dropHostFrames: boolean, rewritten: boolean): Promise<number> {
    if (rewritten) throw new FabricError('INTEGRITY', `context ${entry.id}: disk copies keep vanishing`);
    return this.spill(entry, dropHostFrames, true);
  }

  /**
   * Disk-only pages into host frames, or (a context with no host pages) device frames, making it
   * resident. Returns the blocks read.
   */
  async fill(entry: ContextEntry, target: 'host' | 'device'): Promise<number> {
    const { lease, diskKeys } = this.pool.beginFill(entry.handle, target);
    try {
      // One read of every page: the segments' reads overlap, so the store's reads stay in flight from the
      // first segment to the last (its limits bound the memory). Each block goes from the store's staging
      // memory straight into its frame, checked against its page checksum.
      const refs = Array.from(diskKeys, (key) => this.ledger.ref(key));
      if (refs.length > 0) await this.cold.readBlocks(refs, entry.tenant, (i, bytes) => this.pool.fillWrite(lease, i, bytes));
      this.pool.commitFill(lease);
      return diskKeys.length;
    } catch (err) {
      this.pool.abortLease(lease);
      throw namingContext(err, entry.id);
    }
  }

  /**
   * A context another process wrote to disk, imported from its manifest alone: pass the tenant and the
   * newest version the caller knows of, so another tenant's or a replayed older manifest is refused.
   */
  async adopt(contextId: string, options: ReadManifestOptions): Promise<ContextEntry> {
    const manifest = await this.cold.readManifest(contextId, options);
    const layout = this.pool.layout;
    if (
      manifest.layout.blockBytes !== layout.blockBytes ||
      manifest.layout.tokensPerBlock !== layout.tokensPerBlock ||
      manifest.layout.bytesPerToken !== layout.bytesPerToken
    ) {
      throw new FabricError('INVALID_STATE', `context ${contextId} was written for another block layout`);
    }
    const keys = Float64Array.from(manifest.pages, (page) => this.ledger.register(page));
    const checksums = Uint32Array.from(manifest.pageChecksums);
    const handle: ContextHandle = this.pool.importContext(manifest.tenant, manifest.tokens, keys, checksums);
    this.ledger.retainManifest(manifest.pages);
    return {
      id: contextId,
      handle,
      tenant: manifest.tenant as TenantId,
      version: manifest.version,
      manifest: manifest.pages,
      ...(manifest.attachment ? { attachment: manifest.attachment } : {}),
    };
  }

  /**
   * Writes an adopted context's manifest again, unchanged, as the next version: once this process holds
   * the context, a former holder that passed its fence check just before the adoption can no longer land
   * a late write (the version it would write is taken). ContextFenced when such a write landed first.
   */
  async reseal(entry: ContextEntry): Promise<void> {
    if (!entry.manifest) return;
    const adopted = await this.cold.readManifest(entry.id, { expectedTenant: entry.tenant, minVersion: entry.version });
    if (adopted.version !== entry.version) throw new ContextFenced();
    const next = { ...adopted, version: entry.version + 1, createdAt: new Date().toISOString() };
    await this.cold.writeManifest(next, { replaces: entry.version }).catch((err: unknown) => {
      throw isPreconditionFailed(err) ? new ContextFenced() : err;
    });
    entry.version = next.version;
  }

  /**
   * After the context's blocks were freed: with withManifest, its manifest goes and then every segment
   * only it used; without (another process adopted it), only segments this copy alone used. With
   * manifestStays, the manifest this copy read or wrote is known to stay as it is (a shared prefix's cold
   * copy): the segments it names are no garbage, so no collection checks every manifest for them.
   */
  async released(entry: ContextEntry, withManifest: boolean, manifestStays = false): Promise<void> {
    const named = new Set<string>();
    if (entry.manifest && withManifest) {
      const pages = entry.manifest;
      entry.manifest = undefined;
      // Only the version this copy last wrote or adopted: a worker that took the context over since (this
      // copy a stale holder) keeps its manifest, and the segments it names stay (collectGarbage).
      await this.cold.deleteManifest(entry.id, { version: entry.version }).catch((err: unknown) => {
        if (!isPreconditionFailed(err)) throw err;
      });
      await this.deleteSegments(this.ledger.releaseManifest(pages));
    } else if (entry.manifest) {
      if (manifestStays) for (const page of entry.manifest) named.add(page.segmentId);
      // Segments the other process's manifest names stay (collectGarbage checks every manifest).
      await this.deleteSegments(this.ledger.releaseManifest(entry.manifest).filter((id) => !named.has(id)));
    }
    await this.collectFreedDiskCopies(named);
  }

  /** Deletes the manifest of a context this process does not hold, and the segments nothing else uses. */
  async discard(contextId: string): Promise<void> {
    // Deleted unread only when it is there but damaged (INTEGRITY). A store that failed (UNAVAILABLE) says
    // nothing about it, and one sealed with a master key this ring lacks (PERMISSION_DENIED) may be a worker's
    // that has it: both are refused, and nothing is deleted.
    const manifest = await this.cold.readManifest(contextId).catch((err: unknown) => {
      if (isFabricError(err, 'INTEGRITY')) return undefined;
      throw err;
    });
    // The version read, or the damaged base as found: a worker that adopted or wrote the context since keeps it.
    if (manifest) await this.cold.deleteManifest(contextId, { version: manifest.version });
    else await this.cold.deleteDamagedManifest(contextId);
    const segments = new Set((manifest?.pages ?? []).map((page) => page.segmentId));
    await this.deleteSegments([...segments].filter((id) => !this.ledger.uses(id)));
  }

  /** Disk copies of blocks the allocator freed or rewrote since the last call are deleted once unused (but those in `named`). */
  async collectFreedDiskCopies(named: ReadonlySet<string> = new Set()): Promise<void> {
    const freed = this.pool.takeFreedDiskKeys();
    if (freed.length > 0) await this.deleteSegments(this.ledger.forget(freed).filter((id) => !named.has(id)));
  }

  /**
   * Deletes segments that no manifest names, nothing in this process uses, and that are older than
   * minAgeMs, and retries deletions that failed before; aborts segment uploads left incomplete as old (S3).
   * Returns how many segments and uploads it removed.
   */
  async sweepOrphanSegments(minAgeMs: number): Promise<number> {
    await this.deleteSegments([]);
    let deleted = 0;
    for (const id of await this.cold.orphanSegments({ minAgeMs })) {
      if (this.ledger.uses(id)) continue;
      await this.cold.deleteSegment(id);
      deleted++;
    }
    // The parts of uploads a killed writer never completed: of the same age, so never a live spill's.
    deleted += await this.cold.abortIncompleteUploads(minAgeMs);
    return deleted;
  }

  stats(): { liveSegments: number; blockCopies: number; pendingDeletes: number } {
    return { liveSegments: this.ledger.liveSegments, blockCopies: this.ledger.liveKeys, pendingDeletes: this.gcCandidates.size };
  }

  /** Throws SegmentsVanished when a segment of `written` is no longer in the directory. */
  private async requirePresent(written: readonly ColdBlockRef[]): Promise<void> {
    const present = new Set(await this.cold.listSegments());
    if (written.some((ref) => !present.has(ref.segmentId))) throw new SegmentsVanished();
  }

  /**
   * Pages whose disk copy sits in a segment this spill did not write may point at a file another process
   * deleted (the directory is shared). Forgets those copies; true when there were any.
   */
  private async forgetMissingCopies(entry: ContextEntry, pageKeys: Float64Array, written: readonly ColdBlockRef[]): Promise<boolean> {
    const fresh = new Set(written.map((ref) => ref.segmentId));
    const older = new Set(Array.from(pageKeys, (key) => this.ledger.ref(key).segmentId).filter((id) => !fresh.has(id)));
    if (older.size === 0) return false;
    const present = new Set(await this.cold.listSegments());
    const lost = Array.from(pageKeys).filter((key) => !present.has(this.ledger.ref(key).segmentId));
    if (lost.length === 0) return false;
    this.pool.forgetDiskCopies(entry.handle, Float64Array.from(lost));
    await this.collectFreedDiskCopies();
    return true;
  }

  /**
   * Segments this process no longer uses are deleted only when no manifest in the shared directory names
   * them either: a fork's manifest written by another process may still need its parent's segments.
   */
  private deleteSegments(segmentIds: string[]): Promise<void> {
    if (segmentIds.length === 0 && this.gcCandidates.size === 0) return this.gc;
    for (const id of segmentIds) this.gcCandidates.add(id);
    this.gc = this.gc.then(() => this.collectGarbage());
    return this.gc;
  }

  /** Never fails: a candidate whose deletion failed stays a candidate for the next collection. */
  private async collectGarbage(): Promise<void> {
    if (this.gcCandidates.size === 0) return;
    const pending = new Set(this.gcCandidates);
    this.gcCandidates.clear();
    try {
      // Fails when any manifest cannot be read (another key ring, damage): its segments cannot be told
      // from garbage, so nothing is deleted until it can be.
      const orphans = new Set(await this.cold.orphanSegments());
      for (const id of [...pending]) {
        if (orphans.has(id) && !this.ledger.uses(id)) await this.cold.deleteSegment(id);
        pending.delete(id);
      }
    } catch (err) {
      for (const id of pending) this.gcCandidates.add(id);
      try {
        this.onBackgroundError(`deleting ${pending.size} unused segment file(s)`, err);
      } catch {
        // A failing reporter must not break the collection chain every release waits on.
      }
    }
  }
}
