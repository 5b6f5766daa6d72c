// When a tier runs out of room: the least recently used unpinned contexts leave the device for host
// memory, and offloaded contexts leave host memory for disk. Runs in the foreground when an operation
// would fail for want of room (withRoom), and in the background when a tier's free fraction falls below
// its low watermark (until it is back above the high one).
import { isFabricError, FabricError } from '../fabric/errors';
import type { NativeAllocator } from '../fabric/native-allocator';
import type { ContextStats } from '../fabric/types';
import type { ContextEntry, ContextRegistry } from './context-registry';
import type { Eviction } from './tier-report';

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
  ) {}

  /**
   * Runs attempt; while it fails for want of room in the tier, evicts least recently used contexts
   * (logging each in `log`), or waits for operations in flight, and tries again.
   */
  async withRoom(
    tier: 'device' | 'host',
    requester: ContextEntry,
    blocksNeeded: () => number,
    attempt: () => Promise<void>,
    log: Eviction[],
  ): Promise<void> {
    for (;;) {
      try {
        await attempt();
        return;
      } catch (err) {
        if (!isFabricError(err, 'POOL_EXHAUSTED')) throw err;
        const progressed =
          tier === 'device'
            ? await this.evictDevice(Math.max(blocksNeeded() - this.pool.stats().freeBlocks, 1), log, requester)
            : await this.evictHost(Math.max(blocksNeeded() - this.pool.stats().host.freeBlocks, 1), log, requester);
        if (progressed) continue;
        if (!(await this.waitForOtherOperations())) {
          throw new FabricError('POOL_EXHAUSTED', `${err.message}; nothing left to evict`);
        }
      }
    }
  }

  /** Background demotion, queued behind any already running. */
  schedule(): void {
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
      await this.evictDevice(Math.ceil(deviceHigh * stats.totalBlocks) - stats.freeBlocks, log);
    }
    const host = this.pool.stats().host;
    if (host.totalBlocks > 0 && host.freeBlocks < hostLow * host.totalBlocks) {
      await this.evictHost(Math.ceil(hostHigh * host.totalBlocks) - host.freeBlocks, log);
    }
  }

  /** Demotes LRU resident, unpinned, idle contexts until `blocks` more device blocks are free; false if none moved. */
  private evictDevice(blocks: number, log: Eviction[], requester?: ContextEntry): Promise<boolean> {
    const target = this.pool.stats().freeBlocks + blocks;
    return this.evict(
      { from: 'device', to: 'host' },
      requester,
      (s) => s.resident && s.devicePages > 0,
      () => this.pool.stats().freeBlocks >= target,
      (entry) => this.moves.demote(entry, log),
      log,
    );
  }

  /** Spills LRU offloaded contexts' host pages to disk until `blocks` more host blocks are free; false if none moved. */
  private async evictHost(blocks: number, log: Eviction[], requester?: ContextEntry): Promise<boolean> {
    const spill = this.moves.spill;
    if (!spill) return false;
    const target = this.pool.stats().host.freeBlocks + blocks;
    return this.evict(
      { from: 'host', to: 'disk' },
      requester,
      (s) => !s.resident && s.hostPages > 0,
      () => this.pool.stats().host.freeBlocks >= target,
      spill,
      log,
    );
  }

  private async evict(
    way: Pick<Eviction, 'from' | 'to'>,
    requester: ContextEntry | undefined,
    wanted: (stats: ContextStats) => boolean,
    done: () => boolean,
    move: (entry: ContextEntry) => Promise<number>,
    log: Eviction[],
  ): Promise<boolean> {
    let progressed = false;
    for (const entry of this.registry.leastRecentlyUsed()) {
      if (done()) break;
      if (entry === requester || this.registry.locks.isLocked(entry.id)) continue; // busy: never wait on a context from inside another's lock
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
