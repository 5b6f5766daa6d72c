// TieredMemory: agent contexts by id across the device, host and disk tiers. It owns the policy --
// least recently used unpinned contexts leave the device when it runs low or an allocation would fail,
// host pressure pushes offloaded contexts to disk -- while the native allocator does every byte move
// between device and host and the cold store every byte to and from disk.
import { FabricError, isFabricError } from '../fabric/errors';
import type { NativeAllocator } from '../fabric/native-allocator';
import type { ContextHandle, ContextStats, PoolStats, TenantId } from '../fabric/types';
import type { ColdBlockRef, ColdStore, ContextManifest, ReadManifestOptions } from './cold';
import { DiskLedger } from './disk-ledger';
import { KeyedMutex } from './keyed-mutex';

export type Residency = 'device' | 'host' | 'disk';

export interface TieredMemoryOptions {
  pool: NativeAllocator;
  /** The disk tier; without it contexts stop at the host tier. */
  cold?: ColdStore;
  /** Background demotion starts when the device's free fraction drops below this (default 0.1)... */
  deviceLowWatermark?: number;
  /** ...and stops once it is back above this (default 0.2). */
  deviceHighWatermark?: number;
  hostLowWatermark?: number;
  hostHighWatermark?: number;
  /** Blocks per segment file when spilling (bounds the memory one spill holds; default 64). */
  blocksPerSegment?: number;
  /**
   * A segment no manifest names is garbage once it is this old (default one hour): younger ones may
   * belong to a spill still writing its manifest. A spill slower than half of this re-checks that its
   * own segments still exist before it writes the manifest.
   */
  orphanMinAgeMs?: number;
  /** Failures of background work (garbage collection of segment files); it is retried later. */
  onBackgroundError?: (what: string, err: unknown) => void;
  /**
   * Asked before every manifest write: false when another process has since adopted the context (a
   * fenced, slow holder). The local copy is then dropped, the manifest left alone, and the call fails
   * STALE_HANDLE.
   */
  mayWriteManifest?: (contextId: string) => Promise<boolean>;
}

interface Entry {
  handle: ContextHandle;
  tenant: TenantId;
  lastUse: number;
  /** Version of the newest manifest; segments written for it carry the same version. */
  version: number;
  manifest?: readonly ColdBlockRef[];
}

export interface TieredStats extends PoolStats {
  /** pendingDeletes: unused segment files whose deletion failed and waits for the next collection. */
  disk: { liveSegments: number; blockCopies: number; pendingDeletes: number };
}

export class TieredMemory {
  private readonly pool: NativeAllocator;
  private readonly cold: ColdStore | undefined;
  private readonly entries = new Map<string, Entry>();
  private readonly locks = new KeyedMutex();
  private readonly ledger = new DiskLedger();
  private readonly watermarks: { deviceLow: number; deviceHigh: number; hostLow: number; hostHigh: number };
  private readonly blocksPerSegment: number;
  private readonly orphanMinAgeMs: number;
  private readonly onBackgroundError: (what: string, err: unknown) => void;
  private readonly mayWriteManifest: (contextId: string) => Promise<boolean>;
  private clock = 0;
  /** Operations parked until another one finishes and frees room. */
  private waitingForRoom = 0;
  private maintenance: Promise<void> = Promise.resolve();
  private maintenanceQueued = false;
  private readonly gcCandidates = new Set<string>();
  private gc: Promise<void> = Promise.resolve();

  constructor(options: TieredMemoryOptions) {
    this.pool = options.pool;
    this.cold = options.cold;
    this.watermarks = {
      deviceLow: options.deviceLowWatermark ?? 0.1,
      deviceHigh: options.deviceHighWatermark ?? 0.2,
      hostLow: options.hostLowWatermark ?? 0.1,
      hostHigh: options.hostHighWatermark ?? 0.2,
    };
    this.blocksPerSegment = options.blocksPerSegment ?? 64;
    this.orphanMinAgeMs = options.orphanMinAgeMs ?? 60 * 60 * 1000;
    this.onBackgroundError = options.onBackgroundError ?? (() => undefined);
    this.mayWriteManifest = options.mayWriteManifest ?? (async () => true);
  }

  // ---- lifecycle ----

  create(contextId: string, tenant: TenantId): void {
    this.requireNew(contextId);
    const handle = this.pool.createContext(tenant);
    this.entries.set(contextId, { handle, tenant, lastUse: ++this.clock, version: 0 });
  }

  /** The child shares every block of the parent, wherever they are, and copies on write. */
  async fork(parentId: string, childId: string): Promise<void> {
    this.requireNew(childId);
    return this.locks.run(parentId, async () => {
      const parent = this.entry(parentId);
      this.requireNew(childId);
      const handle = this.pool.fork(parent.handle);
      this.entries.set(childId, { handle, tenant: parent.tenant, lastUse: ++this.clock, version: 0 });
    });
  }

  /** Appends whole tokens; an offloaded context is restored first, and room is made by eviction. */
  append(contextId: string, kv: Uint8Array): Promise<void> {
    return this.locks.run(contextId, async () => {
      const entry = this.touch(contextId);
      await this.restoreLocked(contextId, entry);
      await this.withRoom('device', entry, () => this.appendBlocksNeeded(entry, kv), () => this.pool.appendAsync(entry.handle, kv));
      // The last manifest stays until the next offload or checkpoint replaces it: an older durable copy
      // beats none if this process dies before then (the caller knows which version it trusts).
      await this.collectFreedDiskCopies();
      this.scheduleMaintenance();
    });
  }

  /** Token-major bytes; pages only on disk are restored first. */
  read(contextId: string, startToken: number, tokenCount: number): Promise<Uint8Array> {
    return this.locks.run(contextId, async () => {
      const entry = this.touch(contextId);
      if (this.residencyOf(entry) === 'disk') await this.restoreLocked(contextId, entry);
      return this.pool.readAsync(entry.handle, startToken, tokenCount);
    });
  }

  /** Moves a context off the device: to host memory, or to disk (durably, with a manifest). */
  offload(contextId: string, tier: 'host' | 'disk'): Promise<void> {
    return this.locks.run(contextId, async () => {
      const entry = this.entry(contextId);
      await this.demoteLocked(entry);
      if (tier === 'disk') await this.spillLocked(contextId, entry, true);
      this.scheduleMaintenance();
    });
  }

  /** Writes a durable copy (disk blocks and a manifest) while the context stays where it is. */
  checkpoint(contextId: string): Promise<void> {
    return this.locks.run(contextId, async () => this.spillLocked(contextId, this.entry(contextId), false));
  }

  /** Brings a context back to the device from wherever its pages are. */
  restore(contextId: string): Promise<void> {
    return this.locks.run(contextId, async () => {
      await this.restoreLocked(contextId, this.touch(contextId));
      this.scheduleMaintenance();
    });
  }

  /**
   * Adopts a context another process wrote to disk, from its manifest alone. Pass the tenant and the
   * newest version the caller knows of, so another tenant's or a replayed older manifest is refused.
   */
  async recover(contextId: string, options: ReadManifestOptions = {}): Promise<void> {
    const cold = this.requireCold();
    this.requireNew(contextId);
    return this.locks.run(contextId, async () => {
      this.requireNew(contextId);
      const manifest = await cold.readManifest(contextId, options);
      const layout = this.pool.layout;
      if (
        manifest.layout.blockBytes !== layout.blockBytes ||
        manifest.layout.tokensPerBlock !== layout.tokensPerBlock ||
        manifest.layout.bytesPerToken !== layout.bytesPerToken
      ) {
        throw new FabricError('INVALID_STATE', `context ${contextId} was written for another block layout`);
      }
      const keys = Float64Array.from(manifest.pages, (page) => this.ledger.register(page));
      const handle = this.pool.importContext(manifest.tenant, manifest.tokens, keys);
      this.ledger.retainManifest(manifest.pages);
      this.entries.set(contextId, {
        handle,
        tenant: manifest.tenant,
        lastUse: ++this.clock,
        version: manifest.version,
        manifest: manifest.pages,
      });
    });
  }

  pin(contextId: string): void {
    this.pool.pin(this.entry(contextId).handle);
  }

  unpin(contextId: string): void {
    this.pool.unpin(this.entry(contextId).handle);
  }

  /** Frees the context's blocks and, once unused, its disk copies and manifest. */
  release(contextId: string): Promise<void> {
    return this.locks.run(contextId, async () => this.releaseLocked(contextId, this.entry(contextId), true));
  }

  /**
   * Frees this process's copy of the context but leaves its manifest and the segments it names: another
   * process has adopted the context from them (this one was fenced as a slow holder).
   */
  dropLocalCopy(contextId: string): Promise<void> {
    return this.locks.run(contextId, async () => this.releaseLocked(contextId, this.entry(contextId), false));
  }

  /**
   * Deletes the durable copy of a context this process does not hold (its holder died and it cannot be
   * recovered, or it is being given up): the manifest, and the segments it names once nothing else
   * uses them. A manifest that cannot be read is deleted all the same; its segments are then left to
   * sweepOrphanSegments. A context this process holds is released instead.
   */
  async discard(contextId: string): Promise<void> {
    if (this.entries.has(contextId)) return this.release(contextId);
    const cold = this.requireCold();
    return this.locks.run(contextId, async () => {
      if (this.entries.has(contextId)) throw new FabricError('BUSY', `context ${contextId} was adopted while being discarded`);
      const manifest = await cold.readManifest(contextId).catch(() => undefined);
      await cold.deleteManifest(contextId);
      const segments = new Set((manifest?.pages ?? []).map((page) => page.segmentId));
      await this.deleteSegments([...segments].filter((id) => !this.ledger.uses(id)));
    });
  }

  // ---- inspection ----

  has(contextId: string): boolean {
    return this.entries.has(contextId);
  }

  residency(contextId: string): Residency {
    return this.residencyOf(this.entry(contextId));
  }

  contextStats(contextId: string): ContextStats {
    return this.pool.contextStats(this.entry(contextId).handle);
  }

  /** The allocator handle, for callers that use the pool directly (block tables for an engine). */
  handle(contextId: string): ContextHandle {
    return this.entry(contextId).handle;
  }

  /** Version of the context's newest durable copy (0: none yet); recover() can demand at least this. */
  durableVersion(contextId: string): number {
    const entry = this.entry(contextId);
    return entry.manifest ? entry.version : 0;
  }

  contextIds(): string[] {
    return [...this.entries.keys()];
  }

  stats(): TieredStats {
    return { ...this.pool.stats(), disk: { liveSegments: this.ledger.liveSegments, blockCopies: this.ledger.liveKeys, pendingDeletes: this.gcCandidates.size } };
  }

  /** Resolves when background demotions scheduled so far have finished. */
  async idle(): Promise<void> {
    while (this.maintenanceQueued) await this.maintenance;
    await this.maintenance;
  }

  // ---- moves (the context's lock is held) ----

  private async demoteLocked(entry: Entry): Promise<void> {
    if (!this.pool.contextStats(entry.handle).resident) return;
    await this.withRoom('host', entry, () => this.pool.contextStats(entry.handle).devicePages, () => this.pool.demote(entry.handle));
  }

  private async restoreLocked(contextId: string, entry: Entry): Promise<void> {
    const stats = () => this.pool.contextStats(entry.handle);
    if (stats().resident) return;
    if (stats().diskOnlyPages > 0 && stats().hostPages === 0) {
      // Straight from disk to the device: no host room needed, and each block is copied once.
      await this.withRoom('device', entry, () => stats().diskOnlyPages, () => this.fillLocked(contextId, entry, 'device'));
      return;
    }
    if (stats().diskOnlyPages > 0) {
      await this.withRoom('host', entry, () => stats().diskOnlyPages, () => this.fillLocked(contextId, entry, 'host'));
    }
    await this.withRoom('device', entry, () => stats().hostPages, () => this.pool.promote(entry.handle));
  }

  /** Disk-only pages into host frames, or (a context with no host pages) device frames, making it resident. */
  private async fillLocked(contextId: string, entry: Entry, target: 'host' | 'device'): Promise<void> {
    const cold = this.requireCold();
    const { lease, diskKeys } = this.pool.beginFill(entry.handle, target);
    try {
      for (let start = 0; start < diskKeys.length; start += this.blocksPerSegment) {
        const keys = diskKeys.subarray(start, start + this.blocksPerSegment);
        const blocks = await cold.readBlocks(Array.from(keys, (key) => this.ledger.ref(key)), entry.tenant);
        blocks.forEach((bytes, i) => this.pool.fillWrite(lease, start + i, bytes));
      }
      this.pool.commitFill(lease);
    } catch (err) {
      this.pool.abortLease(lease);
      if (isFabricError(err, 'INTEGRITY') && !err.message.includes(contextId)) {
        throw new FabricError('INTEGRITY', `context ${contextId}: ${err.message}`);
      }
      throw err;
    }
  }

  /** Writes disk copies of every page that lacks one, then a manifest naming them all. */
  private async spillLocked(contextId: string, entry: Entry, dropHostFrames: boolean, rewritten = false): Promise<void> {
    const cold = this.requireCold();
    const version = entry.version + 1;
    const started = Date.now();
    const { lease, blocks } = this.pool.beginSpill(entry.handle);
    const written: ColdBlockRef[] = [];
    let keys: Float64Array | undefined;
    try {
      for (let start = 0; start < blocks; start += this.blocksPerSegment) {
        const chunk: Uint8Array[] = [];
        for (let i = start; i < Math.min(blocks, start + this.blocksPerSegment); i++) chunk.push(this.pool.spillRead(lease, i));
        written.push(...(await cold.writeSegment({ tenant: entry.tenant, contextId, version }, chunk)));
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
      if (err instanceof SegmentsVanished) {
        if (rewritten) throw new FabricError('INTEGRITY', `context ${contextId}: disk copies keep vanishing`);
        return this.spillLocked(contextId, entry, dropHostFrames, true);
      }
      throw err;
    }
    if (blocks === 0 && entry.manifest) return; // every append leaves a page without a disk copy: unchanged, keep the version
    const pageKeys = this.pool.pageDiskKeys(entry.handle);
    if (await this.forgetMissingCopies(entry, pageKeys, written)) {
      // Another process removed files our pages still pointed at: the bytes are in memory, write them again.
      if (rewritten) throw new FabricError('INTEGRITY', `context ${contextId}: disk copies keep vanishing`);
      return this.spillLocked(contextId, entry, dropHostFrames, true);
    }
    if (!(await this.mayWriteManifest(contextId))) {
      await this.releaseLocked(contextId, entry, false);
      throw new FabricError('STALE_HANDLE', `context ${contextId} was adopted by another worker; this copy is dropped`);
    }
    const pages = Array.from(pageKeys, (key) => this.ledger.ref(key));
    const stats = this.pool.contextStats(entry.handle);
    const manifest: ContextManifest = {
      contextId,
      tenant: entry.tenant,
      version,
      tokens: stats.tokens,
      layout: {
        bytesPerToken: this.pool.layout.bytesPerToken,
        tokensPerBlock: this.pool.layout.tokensPerBlock,
        blockBytes: this.pool.layout.blockBytes,
      },
      pages,
      createdAt: new Date().toISOString(),
    };
    await cold.writeManifest(manifest);
    this.ledger.retainManifest(pages);
    const previous = entry.manifest;
    entry.manifest = pages;
    entry.version = version;
    if (previous) await this.deleteSegments(this.ledger.releaseManifest(previous));
  }

  /** Throws SegmentsVanished when a segment of `written` is no longer in the directory. */
  private async requirePresent(written: readonly ColdBlockRef[]): Promise<void> {
    const present = new Set(await this.requireCold().listSegments());
    if (written.some((ref) => !present.has(ref.segmentId))) throw new SegmentsVanished();
  }

  /**
   * Pages whose disk copy sits in a segment this spill did not write may point at a file another process
   * deleted (the directory is shared). Forgets those copies; true when there were any.
   */
  private async forgetMissingCopies(entry: Entry, pageKeys: Float64Array, written: readonly ColdBlockRef[]): Promise<boolean> {
    const fresh = new Set(written.map((ref) => ref.segmentId));
    const older = new Set(Array.from(pageKeys, (key) => this.ledger.ref(key).segmentId).filter((id) => !fresh.has(id)));
    if (older.size === 0) return false;
    const present = new Set(await this.requireCold().listSegments());
    const lost = Array.from(pageKeys).filter((key) => !present.has(this.ledger.ref(key).segmentId));
    if (lost.length === 0) return false;
    this.pool.forgetDiskCopies(entry.handle, Float64Array.from(lost));
    await this.collectFreedDiskCopies();
    return true;
  }

  private async releaseLocked(contextId: string, entry: Entry, withDurableCopy: boolean): Promise<void> {
    this.pool.release(entry.handle);
    this.entries.delete(contextId);
    if (entry.manifest && withDurableCopy) {
      await this.dropManifest(contextId, entry);
    } else if (entry.manifest) {
      // Segments only this copy used go; those the other process's manifest names stay (collectGarbage).
      await this.deleteSegments(this.ledger.releaseManifest(entry.manifest));
    }
    await this.collectFreedDiskCopies();
  }

  private async dropManifest(contextId: string, entry: Entry): Promise<void> {
    const cold = this.requireCold();
    const pages = entry.manifest ?? [];
    entry.manifest = undefined;
    await cold.deleteManifest(contextId);
    await this.deleteSegments(this.ledger.releaseManifest(pages));
  }

  private async collectFreedDiskCopies(): Promise<void> {
    const freed = this.pool.takeFreedDiskKeys();
    if (freed.length > 0) await this.deleteSegments(this.ledger.forget(freed));
  }

  /**
   * Segments this process no longer uses are deleted only when no manifest in the shared directory names
   * them either: a fork's manifest written by another process may still need its parent's segments.
   */
  private deleteSegments(segmentIds: string[]): Promise<void> {
    if (!this.cold || (segmentIds.length === 0 && this.gcCandidates.size === 0)) return this.gc;
    for (const id of segmentIds) this.gcCandidates.add(id);
    this.gc = this.gc.then(() => this.collectGarbage());
    return this.gc;
  }

  /** Never fails: a candidate whose deletion failed stays a candidate for the next collection. */
  private async collectGarbage(): Promise<void> {
    const cold = this.requireCold();
    if (this.gcCandidates.size === 0) return;
    const pending = new Set(this.gcCandidates);
    this.gcCandidates.clear();
    try {
      // Fails when any manifest cannot be read (another key ring, damage): its segments cannot be told
      // from garbage, so nothing is deleted until it can be.
      const orphans = new Set(await cold.orphanSegments());
      for (const id of [...pending]) {
        if (orphans.has(id) && !this.ledger.uses(id)) await cold.deleteSegment(id);
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

  /**
   * Deletes segments that no manifest names, nothing in this process uses, and that are older than
   * minAgeMs (default: the orphanMinAgeMs option; younger ones may belong to a spill still writing its
   * manifest), and retries deletions that failed before. For workers, at start and now and then: files
   * left by processes that died between a segment and its manifest. Returns how many it deleted.
   */
  async sweepOrphanSegments(minAgeMs = this.orphanMinAgeMs): Promise<number> {
    const cold = this.requireCold();
    await this.deleteSegments([]);
    let deleted = 0;
    for (const id of await cold.orphanSegments({ minAgeMs })) {
      if (this.ledger.uses(id)) continue;
      await cold.deleteSegment(id);
      deleted++;
    }
    return deleted;
  }

  // ---- making room ----

  /**
   * Runs attempt; while it fails for want of room in the tier, evicts least recently used contexts
   * (device: demote to host; host: spill to disk), or waits for operations in flight, and tries again.
   */
  private async withRoom(tier: 'device' | 'host', requester: Entry, blocksNeeded: () => number, attempt: () => Promise<void>): Promise<void> {
    for (;;) {
      try {
        await attempt();
        return;
      } catch (err) {
        if (!isFabricError(err, 'POOL_EXHAUSTED')) throw err;
        const progressed =
          tier === 'device'
            ? await this.evictDevice(Math.max(blocksNeeded() - this.pool.stats().freeBlocks, 1), requester)
            : await this.evictHost(Math.max(blocksNeeded() - this.pool.stats().host.freeBlocks, 1), requester);
        if (progressed) continue;
        if (!(await this.waitForOtherOperations())) {
          throw new FabricError('POOL_EXHAUSTED', `${err.message}; nothing left to evict`);
        }
      }
    }
  }

  private appendBlocksNeeded(entry: Entry, kv: Uint8Array): number {
    const { tokensPerBlock, bytesPerToken } = this.pool.layout;
    const stats = this.pool.contextStats(entry.handle);
    const tokens = stats.tokens + Math.floor(kv.length / bytesPerToken);
    // A copy-on-write block may need one more; the retry loop in withDeviceRoom evicts for it then.
    return Math.ceil(tokens / tokensPerBlock) - stats.blocks;
  }

  /**
   * When every eviction candidate is busy, room may still come: another operation in flight will
   * finish and leave its context evictable. Waits for that; false when every other operation is itself
   * waiting for room (waiting then could never end).
   */
  private async waitForOtherOperations(): Promise<boolean> {
    const others = this.locks.lockedKeys - 1 - this.waitingForRoom; // minus the caller's own context
    if (others <= 0) return false;
    this.waitingForRoom++;
    try {
      await this.locks.nextRelease();
    } finally {
      this.waitingForRoom--;
    }
    return true;
  }

  /** Demotes LRU resident, unpinned, idle contexts until `blocks` more device blocks are free; false if none moved. */
  private async evictDevice(blocks: number, requester?: Entry): Promise<boolean> {
    const target = this.pool.stats().freeBlocks + blocks;
    return this.evict(requester, (s) => s.resident && s.devicePages > 0, () => this.pool.stats().freeBlocks >= target, (_id, entry) =>
      this.demoteLocked(entry),
    );
  }

  /** Spills LRU offloaded contexts' host pages to disk until `blocks` more host blocks are free; false if none moved. */
  private async evictHost(blocks: number, requester?: Entry): Promise<boolean> {
    if (!this.cold) return false;
    const target = this.pool.stats().host.freeBlocks + blocks;
    return this.evict(requester, (s) => !s.resident && s.hostPages > 0, () => this.pool.stats().host.freeBlocks >= target, (id, entry) =>
      this.spillLocked(id, entry, true),
    );
  }

  private async evict(
    requester: Entry | undefined,
    wanted: (stats: ContextStats) => boolean,
    done: () => boolean,
    move: (id: string, entry: Entry) => Promise<void>,
  ): Promise<boolean> {
    let progressed = false;
    for (const [id, entry] of this.lruCandidates(requester, wanted)) {
      if (done()) break;
      if (this.locks.isLocked(id)) continue; // busy: never wait on a context from inside another's lock
      try {
        progressed =
          (await this.locks.run(id, async () => {
            if (this.entries.get(id) !== entry) return false; // released while we looked
            await move(id, entry);
            return true;
          })) || progressed;
      } catch (err) {
        if (!isFabricError(err, 'POOL_EXHAUSTED') && !isFabricError(err, 'BUSY')) throw err;
      }
    }
    return progressed;
  }

  private lruCandidates(requester: Entry | undefined, wanted: (stats: ContextStats) => boolean): Array<[string, Entry]> {
    return [...this.entries]
      .filter(([, entry]) => {
        if (entry === requester) return false;
        const stats = this.pool.contextStats(entry.handle);
        return stats.pinCount === 0 && wanted(stats);
      })
      .sort((a, b) => a[1].lastUse - b[1].lastUse);
  }

  /** Background demotion when a tier's free fraction falls below its low watermark. */
  private scheduleMaintenance(): void {
    if (this.maintenanceQueued) return;
    this.maintenanceQueued = true;
    this.maintenance = this.maintenance.then(async () => {
      this.maintenanceQueued = false;
      try {
        await this.rebalance();
      } catch {
        // Best effort: a failed background demotion leaves contexts where they were; the next
        // allocation that needs room evicts on its own path and reports its error there.
      }
    });
  }

  private async rebalance(): Promise<void> {
    const { deviceLow, deviceHigh, hostLow, hostHigh } = this.watermarks;
    const stats = this.pool.stats();
    if (stats.freeBlocks < deviceLow * stats.totalBlocks) {
      await this.evictDevice(Math.ceil(deviceHigh * stats.totalBlocks) - stats.freeBlocks);
    }
    const host = this.pool.stats().host;
    if (this.cold && host.totalBlocks > 0 && host.freeBlocks < hostLow * host.totalBlocks) {
      await this.evictHost(Math.ceil(hostHigh * host.totalBlocks) - host.freeBlocks);
    }
  }

  // ---- helpers ----

  /** Where the pages are: an offloaded context whose pages a resident fork keeps on the device is 'device'. */
  private residencyOf(entry: Entry): Residency {
    const stats = this.pool.contextStats(entry.handle);
    if (stats.resident) return 'device';
    if (stats.diskOnlyPages > 0) return 'disk';
    if (stats.hostPages > 0 || stats.blocks === 0) return 'host';
    return 'device';
  }

  private entry(contextId: string): Entry {
    const entry = this.entries.get(contextId);
    if (!entry) throw new FabricError('STALE_HANDLE', `no context ${contextId}`);
    return entry;
  }

  private touch(contextId: string): Entry {
    const entry = this.entry(contextId);
    entry.lastUse = ++this.clock;
    return entry;
  }

  private requireNew(contextId: string): void {
    if (typeof contextId !== 'string' || contextId.length === 0) {
      throw new FabricError('INVALID_ARGUMENT', 'context id must be a non-empty string');
    }
    if (this.entries.has(contextId)) throw new FabricError('INVALID_ARGUMENT', `context ${contextId} already exists`);
  }

  private requireCold(): ColdStore {
    if (!this.cold) throw new FabricError('INVALID_STATE', 'no disk tier is configured');
    return this.cold;
  }
}

/** A segment a spill wrote was deleted (a sweep took it for garbage) before the spill committed. */
class SegmentsVanished extends Error {}
