// Moves of one context between tiers, each under that context's lock and each returning the bytes that
// changed tier: device to host (demote), host or disk to the device (promote), to disk (spill), and out
// of this process (drop). Room is made by the eviction policy, which logs what it pushed aside.
import { FabricError } from '../fabric/errors';
import type { NativeAllocator } from '../fabric/native-allocator';
import { moveNamed } from './context-errors';
import type { ContextEntry, ContextRegistry } from './context-registry';
import { ContextFenced, type DurableCopies } from './durable-copies';
import type { EvictionPolicy, QuotaCharge } from './eviction-policy';
import type { Eviction } from './tier-report';

export class TierMoves {
  constructor(
    private readonly pool: NativeAllocator,
    private readonly registry: ContextRegistry,
    private readonly durable: DurableCopies | undefined,
    private readonly eviction: () => EvictionPolicy,
  ) {}

  /**
   * Resident to offloaded: blocks no other resident context uses go to host memory. `charge`: whether they
   * count against the tenant's host quota ('none' when eviction moves the context of its own accord).
   */
  async demote(entry: ContextEntry, log: Eviction[], charge: QuotaCharge): Promise<number> {
    const stats = () => this.pool.contextStats(entry.handle);
    const before = stats();
    if (!before.resident) return 0;
    await this.eviction().withRoom(
      'host',
      entry,
      () => stats().devicePages,
      () => moveNamed(entry.id, () => this.pool.demote(entry.handle)),
      log,
      charge,
    );
    return (before.devicePages - stats().devicePages) * this.pool.layout.blockBytes;
  }

  /**
   * Back to the device from wherever the pages are (disk-only pages filled from the durable copy); returns
   * the bytes that arrived there.
   */
  async promote(entry: ContextEntry, log: Eviction[]): Promise<number> {
    const stats = () => this.pool.contextStats(entry.handle);
    const before = stats();
    if (before.resident) return 0;
    const room = this.eviction();
    if (before.diskOnlyPages > 0 && before.hostPages === 0) {
      // Straight from disk to the device: no host room needed, and each block is copied once.
      await room.withRoom(
        'device',
        entry,
        () => stats().diskOnlyPages,
        () => this.fill(entry, 'device'),
        log,
        'tier-and-pinned',
      );
    } else {
      if (before.diskOnlyPages > 0) {
        await room.withRoom(
          'host',
          entry,
          () => stats().diskOnlyPages,
          () => this.fill(entry, 'host'),
          log,
          'tier-and-pinned',
        );
      }
      await room.withRoom(
        'device',
        entry,
        () => stats().hostPages,
        () => moveNamed(entry.id, () => this.pool.promote(entry.handle)),
        log,
      );
    }
    return (stats().devicePages - before.devicePages) * this.pool.layout.blockBytes;
  }

  /**
   * Up as far as room that is free already takes it, evicting nothing (a planned wake-up's prefetch): pages
   * only on disk straight to the device when it takes them, else into host frames when the host takes them;
   * then host pages to the device when it takes them. Returns the bytes that arrived on the tier reached.
   */
  async promoteIntoFreeRoom(entry: ContextEntry): Promise<number> {
    const stats = () => this.pool.contextStats(entry.handle);
    const before = stats();
    if (before.resident) return 0;
    const room = this.eviction();
    const direct =
      before.hostPages === 0 &&
      before.diskOnlyPages > 0 &&
      (await room.inFreeRoom('device', entry, before.diskOnlyPages, () => this.fill(entry, 'device')));
    if (!direct) {
      const onHost =
        before.diskOnlyPages === 0 || (await room.inFreeRoom('host', entry, before.diskOnlyPages, () => this.fill(entry, 'host')));
      if (onHost) {
        await room.inFreeRoom('device', entry, stats().hostPages, () => moveNamed(entry.id, () => this.pool.promote(entry.handle)));
      }
    }
    const after = stats();
    const arrived = after.resident ? after.devicePages - before.devicePages : after.hostPages - before.hostPages;
    return arrived * this.pool.layout.blockBytes;
  }

  /**
   * Writes the durable copy; with dropHostFrames an offloaded context's host frames are freed too.
   * Returns the bytes that became disk-only. A context another process adopted meanwhile is dropped
   * here (its manifest left alone) and the call fails STALE_HANDLE.
   */
  async spill(entry: ContextEntry, dropHostFrames: boolean): Promise<number> {
    const durable = this.requireDurable();
    const diskOnly = () => this.pool.contextStats(entry.handle).diskOnlyPages;
    const before = diskOnly();
    try {
      await durable.spill(entry, dropHostFrames);
    } catch (err) {
      if (!(err instanceof ContextFenced)) throw err;
      await this.drop(entry, false);
      throw new FabricError('STALE_HANDLE', `context ${entry.id} was adopted by another worker; this copy is dropped`);
    }
    return (diskOnly() - before) * this.pool.layout.blockBytes;
  }

  /** Frees this process's copy; withManifest also deletes the durable copy once nothing else uses it. */
  async drop(entry: ContextEntry, withManifest: boolean, manifestStays = false): Promise<void> {
    this.pool.release(entry.handle);
    this.registry.remove(entry);
    await this.durable?.released(entry, withManifest, manifestStays);
  }

  requireDurable(): DurableCopies {
    if (!this.durable) throw new FabricError('INVALID_STATE', 'no disk tier is configured');
    return this.durable;
  }

  private async fill(entry: ContextEntry, target: 'host' | 'device'): Promise<void> {
    await this.requireDurable().fill(entry, target);
  }
}
