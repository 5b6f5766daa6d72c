// When a tier runs out of room: the least recently used unpinned contexts leave the device for host
// memory, and offloaded contexts leave host memory for disk, those of tenants over their fair share of the
// tier first (fair-share.ts). Runs in the foreground when an operation would fail for want of room
// (withRoom), and in the background when a tier's free fraction falls below its low watermark (until it
// is back above the high one). A tenant's own request is held to its quotas first (tenant-quotas.ts): past
// one, room comes only from that tenant's own contexts, or the request is refused RESOURCE_EXHAUSTED.
import { isFabricError, FabricError } from '../fabric/errors';
import type { NativeAllocator } from '../fabric/native-allocator';
import type { ContextStats } from '../fabric/types';
import type { ContextEntry, ContextRegistry } from './context-registry';
import { fairEvictionOrder, tenantsOverFairShare, usageOn } from './fair-share';
import type { TenantQuotas } from './tenant-quotas';
import type { Eviction } from './tier-report';

/**
 * Which of the requester's tenant's quotas blocks that arrive on a tier count against: none (eviction moving
 * a context of its own accord), the tier's, or the tier's and, for a pinned context, the pinned quota too
 * (blocks new to memory: appended, or filled from disk).
 */
export type QuotaCharge = 'none' | 'tier' | 'tier-and-pinned';

/** The moves eviction makes, under the moved context's lock; each returns the bytes that changed tier. */
export interface EvictionMoves {
  /** Device to host. */
  demote: (entry: ContextEntry, log: Eviction[]) => Promise<number>;
  /** Host to disk; absent without a disk tier. */
  spill?: (entry: ContextEntry) => Promise<number>;
}

export interface Watermarks {
  deviceLow: number;
  deviceHigh: number;
  hostLow: number;
  hostHigh: number;
}

export class EvictionPolicy {
  /** Operations parked until another one finishes and frees room. */
  private waitingForRoom = 0;
  private maintenance: Promise<void> = Promise.resolve();
  private maintenanceQueued = false;

  constructor(
    private readonly pool: NativeAllocator,
    private readonly registry: ContextRegistry,
    private readonly watermarks: Watermarks,
    private readonly moves: EvictionMoves,
    /** Told of every eviction, foreground or background. */
    private readonly onEviction: (eviction: Eviction) => void,
    /** Absent: no per-tenant limits (a pool one tenant uses); workers always have them. */
    private readonly quotas: TenantQuotas | undefined,
  ) {}

  /**
   * Runs attempt; while it fails for want of room in the tier, evicts least recently used contexts, those
   * of tenants over their fair share first (logging each in `log`), or waits for operations in flight, and
   * tries again. First, unless `charge` is 'none', the requester's tenant is brought within its quotas for
   * the blocks needed, from its own contexts only (RESOURCE_EXHAUSTED when it cannot be).
   */
  async withRoom(
    tier: 'device' | 'host',
    requester: ContextEntry,
    blocksNeeded: () => number,
    attempt: () => Promise<void>,
    log: Eviction[],
    charge: QuotaCharge = 'tier',
  ): Promise<void> {
    if (charge !== 'none' && this.quotas)
      await this.withinQuota(this.quotas, tier, requester, blocksNeeded, log, charge === 'tier-and-pinned');
    for (;;) {
      try {
        await attempt();
        return;
      } catch (err) {
        if (!isFabricError(err, 'POOL_EXHAUSTED')) throw err;
        const progressed =
          tier === 'device'
            ? await this.evictDevice(this.deviceFreeBy(Math.max(blocksNeeded() - this.pool.stats().freeBlocks, 1)), log, requester)
            : await this.evictHost(this.hostFreeBy(Math.max(blocksNeeded() - this.pool.stats().host.freeBlocks, 1)), log, requester);
        if (progressed) continue;
        if (!(await this.waitForOtherOperations())) {
          throw new FabricError('POOL_EXHAUSTED', `${err.message}; nothing left to evict`);
        }
      }
    }
  }

  /**
   * Runs attempt only in room that is free already, evicting nothing (a planned wake-up's prefetch): the
   * tier keeps its low watermark after `blocks` more (so no background demotion follows either), and the
   * requester's tenant stays within its quotas. False, with nothing moved, when there is no such room or
   * another operation took it first (the attempt failed POOL_EXHAUSTED).
   */
  async inFreeRoom(tier: 'device' | 'host', requester: ContextEntry, blocks: number, attempt: () => Promise<void>): Promise<boolean> {
    if (!this.hasFreeRoom(tier, requester, blocks)) return false;
    try {
      await attempt();
      return true;
    } catch (err) {
      if (isFabricError(err, 'POOL_EXHAUSTED')) return false;
      throw err;
    }
  }

  private hasFreeRoom(tier: 'device' | 'host', requester: ContextEntry, blocks: number): boolean {
    const stats = this.pool.stats();
    const { freeBlocks, totalBlocks } = tier === 'device' ? stats : stats.host;
    const low = tier === 'device' ? this.watermarks.deviceLow : this.watermarks.hostLow;
    if (freeBlocks - blocks < low * totalBlocks) return false;
    if (!this.quotas) return true;
    const pinned = this.pool.contextStats(requester.handle).pinCount > 0;
    return (
      this.quotas.excess(requester.tenant, tier, blocks) <= 0 && !(pinned && this.quotas.excess(requester.tenant, 'pinned', blocks) > 0)
    );
  }

  /**
   * Makes room under the requester's tenant's `tier` quota by evicting that tenant's own contexts, waiting
   * for its operations in flight when all of them are busy; RESOURCE_EXHAUSTED naming the quota otherwise.
   * Pinned blocks are never evicted, so a pinned context over the pinned quota is refused at once.
   */
  private async withinQuota(
    quotas: TenantQuotas,
    tier: 'device' | 'host',
    requester: ContextEntry,
    blocksNeeded: () => number,
    log: Eviction[],
    pinnedToo: boolean,
  ): Promise<void> {
    if (
      pinnedToo &&
      this.pool.contextStats(requester.handle).pinCount > 0 &&
      quotas.excess(requester.tenant, 'pinned', blocksNeeded()) > 0
    ) {
      throw quotas.refusal(requester.id, requester.tenant, 'pinned', blocksNeeded());
    }
    const fits = () => quotas.excess(requester.tenant, tier, blocksNeeded()) <= 0;
    while (!fits()) {
      const own = () => this.ownContexts(requester);
      const progressed =
        tier === 'device' ? await this.evictDevice(fits, log, requester, own) : await this.evictHost(fits, log, requester, own);
      if (progressed) continue;
      const ownBusy = [...own()].some((entry) => entry !== requester && this.registry.locks.isLocked(entry.id));
      if (!ownBusy || !(await this.waitForOtherOperations())) {
        throw quotas.refusal(requester.id, requester.tenant, tier, blocksNeeded());
      }
    }
  }

  /** The requester's tenant's contexts, least recently used first. */
  private *ownContexts(requester: ContextEntry): Generator<ContextEntry> {
    for (const entry of this.registry.leastRecentlyUsed()) if (entry.tenant === requester.tenant) yield entry;
  }

  /** Every context, those of tenants over their fair share of `tier` first (the requester's tenant counted among those sharing it). */
  private fairOrder(tier: 'device' | 'host', requester: ContextEntry | undefined): () => Iterable<ContextEntry> {
    const stats = this.pool.stats();
    const total = tier === 'device' ? stats.totalBlocks : stats.host.totalBlocks;
    const over = tenantsOverFairShare(usageOn(tier, this.pool.tenantBlocks()), total, requester?.tenant);
    return () => fairEvictionOrder(() => this.registry.leastRecentlyUsed(), over);
  }

  /**
   * Background demotion, queued behind any already running. It starts on a later turn of the event loop,
   * once the operation that scheduled it has let go of its context's lock: that context is a candidate too
   * (skipping it, busy, would take the next tenant's instead of the one over its fair share).
   */
  schedule(): void {
    if (this.maintenanceQueued) return;
    this.maintenanceQueued = true;
    this.maintenance = this.maintenance.then(async () => {
      await new Promise<void>((resolve) => setImmediate(resolve));
      this.maintenanceQueued = false;
      try {
        await this.rebalance();
      } catch {
        // Best effort: a failed background demotion leaves contexts where they were; the next
        // allocation that needs room evicts on its own path and reports its error there.
      }
    });
  }

  /** Resolves when background demotions scheduled so far have finished. */
  async idle(): Promise<void> {
    while (this.maintenanceQueued) await this.maintenance;
    await this.maintenance;
  }

  /**
   * When every eviction candidate is busy, room may still come: another operation in flight will
   * finish and leave its context evictable. Waits for that; false when every other operation is itself
   * waiting for room (waiting then could never end).
   */
  private async waitForOtherOperations(): Promise<boolean> {
    const locks = this.registry.locks;
    const others = locks.lockedKeys - 1 - this.waitingForRoom; // minus the caller's own context
    if (others <= 0) return false;
    this.waitingForRoom++;
    try {
      await locks.nextRelease();
    } finally {
      this.waitingForRoom--;
    }
    return true;
  }

  private async rebalance(): Promise<void> {
    const { deviceLow, deviceHigh, hostLow, hostHigh } = this.watermarks;
    const stats = this.pool.stats();
    const log: Eviction[] = [];
    if (stats.freeBlocks < deviceLow * stats.totalBlocks) {
      await this.evictDevice(this.deviceFreeBy(Math.ceil(deviceHigh * stats.totalBlocks) - stats.freeBlocks), log);
    }
    const host = this.pool.stats().host;
    if (host.totalBlocks > 0 && host.freeBlocks < hostLow * host.totalBlocks) {
      await this.evictHost(this.hostFreeBy(Math.ceil(hostHigh * host.totalBlocks) - host.freeBlocks), log);
    }
  }

  /** Whether `blocks` more device blocks are free than now. */
  private deviceFreeBy(blocks: number): () => boolean {
    const target = this.pool.stats().freeBlocks + blocks;
    return () => this.pool.stats().freeBlocks >= target;
  }

  private hostFreeBy(blocks: number): () => boolean {
    const target = this.pool.stats().host.freeBlocks + blocks;
    return () => this.pool.stats().host.freeBlocks >= target;
  }

  /**
   * Demotes resident, unpinned, idle contexts from `order` (default: fair order) until `done`; false if
   * none moved.
   */
  private evictDevice(
    done: () => boolean,
    log: Eviction[],
    requester?: ContextEntry,
    order = this.fairOrder('device', requester),
  ): Promise<boolean> {
    return this.evict(
      { from: 'device', to: 'host' },
      requester,
      order,
      (s) => s.resident && s.devicePages > 0,
      done,
      (entry) => this.moves.demote(entry, log),
      log,
    );
  }

  /** Spills offloaded contexts' host pages to disk from `order` (default: fair order) until `done`; false if none moved. */
  private async evictHost(
    done: () => boolean,
    log: Eviction[],
    requester?: ContextEntry,
    order?: () => Iterable<ContextEntry>,
  ): Promise<boolean> {
    const spill = this.moves.spill;
    if (!spill) return false;
    return this.evict(
      { from: 'host', to: 'disk' },
      requester,
      order ?? this.fairOrder('host', requester),
      (s) => !s.resident && s.hostPages > 0,
      done,
      spill,
      log,
    );
  }

  private async evict(
    way: Pick<Eviction, 'from' | 'to'>,
    requester: ContextEntry | undefined,
    order: () => Iterable<ContextEntry>,
    wanted: (stats: ContextStats) => boolean,
    done: () => boolean,
    move: (entry: ContextEntry) => Promise<number>,
    log: Eviction[],
  ): Promise<boolean> {
    let progressed = false;
    for (const entry of order()) {
      if (done()) break;
      // busy: never wait on a context from inside another's lock
      if (entry === requester || this.registry.locks.isLocked(entry.id)) continue;
      const stats = this.pool.contextStats(entry.handle);
      if (stats.pinCount > 0 || !wanted(stats)) continue;
      try {
        const moved = await this.registry.locks.run(entry.id, async () => {
          if (!this.registry.holds(entry)) return false; // released while we looked
          const bytes = await move(entry);
          const eviction = { contextId: entry.id, ...way, bytes };
          log.push(eviction);
          this.onEviction(eviction);
          return true;
        });
        progressed = moved || progressed;
      } catch (err) {
        if (!isFabricError(err, 'POOL_EXHAUSTED') && !isFabricError(err, 'BUSY')) throw err;
      }
    }
    return progressed;
  }
}
