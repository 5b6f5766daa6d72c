// TieredMemory: agent contexts by id across the device, host and disk tiers. A facade over four parts:
// the context registry (handles, locks, order of last use), the tier moves, the durable copies with
// their disk ledger, and the eviction policy. The native allocator does every byte move between device
// and host, the cold store every byte to and from disk. Moves report what they did (MoveReport), and
// every eviction reaches the listeners added with onEviction.
import { FabricError } from '../fabric/errors';
import type { NativeAllocator } from '../fabric/native-allocator';
import type { Tier } from '../fabric/tier';
import type { ContextHandle, ContextStats, MemoryFile, PlaneMajorPiece, PoolStats, TenantBlocks, TenantId } from '../fabric/types';
import type { ColdStore, ContextAttachment, ReadManifestOptions } from './cold';
import { STALE_TEMP_AGE_MS } from '../blob-store/posix/temp-files';
import { ContextRegistry, type ContextEntry } from './context-registry';
import { ContextFenced, DurableCopies } from './durable-copies';
import { EvictionPolicy } from './eviction-policy';
import { TenantQuotas, type QuotaRefusal, type TenantQuotaShares } from './tenant-quotas';
import { TierMoves } from './tier-moves';
import type { Eviction, MoveReport } from './tier-report';

export type { Eviction, MoveReport } from './tier-report';
export type { QuotaRefusal, TenantQuotaShares } from './tenant-quotas';

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
  /**
   * Each tenant's share of the tiers (tenant-quotas.ts): shares not given take DEFAULT_TENANT_QUOTA_SHARES.
   * Absent: no per-tenant limits (a pool one tenant uses, tests); workers always set them.
   */
  quotas?: Partial<TenantQuotaShares>;
}

export interface TieredStats extends PoolStats {
  /** pendingDeletes: unused segment files whose deletion failed and waits for the next collection. */
  disk: { liveSegments: number; blockCopies: number; pendingDeletes: number };
}

export class TieredMemory {
  private readonly pool: NativeAllocator;
  private readonly registry = new ContextRegistry();
  private readonly durable: DurableCopies | undefined;
  private readonly moves: TierMoves;
  private readonly eviction: EvictionPolicy;
  private readonly evictionListeners = new Set<(eviction: Eviction) => void>();
  private readonly quotaRefusalListeners = new Set<(refusal: QuotaRefusal) => void>();
  private readonly quotas: TenantQuotas | undefined;

  constructor(options: TieredMemoryOptions) {
    this.pool = options.pool;
    this.durable =
      options.cold &&
      new DurableCopies({
        pool: options.pool,
        cold: options.cold,
        blocksPerSegment: options.blocksPerSegment ?? 64,
        orphanMinAgeMs: options.orphanMinAgeMs ?? STALE_TEMP_AGE_MS,
        onBackgroundError: options.onBackgroundError ?? (() => undefined),
        mayWriteManifest: options.mayWriteManifest ?? (async () => true),
      });
    this.quotas =
      options.quotas &&
      new TenantQuotas(this.pool, options.quotas, (refusal) => {
        for (const listener of this.quotaRefusalListeners) listener(refusal);
      });
    this.moves = new TierMoves(this.pool, this.registry, this.durable, () => this.eviction);
    this.eviction = new EvictionPolicy(
      this.pool,
      this.registry,
      {
        deviceLow: options.deviceLowWatermark ?? 0.1,
        deviceHigh: options.deviceHighWatermark ?? 0.2,
        hostLow: options.hostLowWatermark ?? 0.1,
        hostHigh: options.hostHighWatermark ?? 0.2,
      },
      {
        demote: (entry, log) => this.moves.demote(entry, log, 'none'),
        ...(this.durable ? { spill: (entry: ContextEntry) => this.moves.spill(entry, true) } : {}),
      },
      (eviction) => {
        for (const listener of this.evictionListeners) listener(eviction);
      },
      this.quotas,
    );
  }

  /** Calls `listener` for every context this layer pushes deeper on its own; returns the unsubscribe. */
  onEviction(listener: (eviction: Eviction) => void): () => void {
    this.evictionListeners.add(listener);
    return () => this.evictionListeners.delete(listener);
  }

  /** Calls `listener` for every call refused RESOURCE_EXHAUSTED by a tenant quota; returns the unsubscribe. */
  onQuotaRefusal(listener: (refusal: QuotaRefusal) => void): () => void {
    this.quotaRefusalListeners.add(listener);
    return () => this.quotaRefusalListeners.delete(listener);
  }

  // ---- lifecycle ----

  create(contextId: string, tenant: TenantId): void {
    this.registry.requireNew(contextId);
    this.registry.add({ id: contextId, handle: this.pool.createContext(tenant), tenant, version: 0 });
  }

  /** The child shares every block of the parent, wherever they are, and copies on write. */
  async fork(parentId: string, childId: string): Promise<void> {
    this.registry.requireNew(childId);
    return this.locked(parentId, async (parent) => {
      this.registry.requireNew(childId);
      const child: ContextEntry = { id: childId, handle: this.pool.fork(parent.handle), tenant: parent.tenant, version: 0 };
      if (parent.attachment) child.attachment = parent.attachment;
      this.registry.add(child);
    });
  }

  /**
   * The empty context `contextId` takes the first `blocks` full blocks of `holderId` (a prefix of its own
   * tenant's, held for sharing: src/prefix-sharing) by reference, as a prefix fork (copy on write), with
   * `attachment` as its note: the context's empty handle gives way to the fork. INVALID_STATE unless the
   * context is empty and unpinned; PERMISSION_DENIED for another tenant's holder, whatever the caller's
   * keys said; OUT_OF_RANGE past the holder's full blocks.
   */
  sharePrefix(contextId: string, holderId: string, blocks: number, attachment: ContextAttachment): Promise<void> {
    return this.locked(contextId, (entry) =>
      this.locked(holderId, async (holder) => {
        if (holder.tenant !== entry.tenant) throw new FabricError('PERMISSION_DENIED', `context ${holderId} is another tenant's`);
        const stats = this.pool.contextStats(entry.handle);
        if (stats.tokens !== 0 || stats.pinCount !== 0) {
          throw new FabricError('INVALID_STATE', `context ${contextId} must be empty and unpinned to take a shared prefix`);
        }
        const shared: ContextEntry = { ...entry, handle: this.pool.forkPrefix(holder.handle, blocks), attachment };
        this.pool.release(entry.handle);
        this.registry.remove(entry);
        this.registry.add(shared);
      }),
    );
  }

  /**
   * Appends whole tokens; an offloaded context is promoted first, and room is made by eviction. An
   * attachment given replaces the context's once the tokens are in, under the same lock, so no durable
   * copy ever pairs these pages with another note. `expectedHandle`: append only to that incarnation
   * of the id (STALE_HANDLE when it was freed, or made again, meanwhile). Returns the evictions it caused.
   */
  append(contextId: string, kv: Uint8Array, attachment?: ContextAttachment, expectedHandle?: ContextHandle): Promise<Eviction[]> {
    // The caller's buffer may be detached or resized while this waits for the lock or for room; the
    // native append checks it again for each piece it takes once it runs.
    const bytes = kv.byteLength;
    return this.locked(contextId, async (entry) => {
      if (expectedHandle !== undefined && entry.handle !== expectedHandle) {
        throw new FabricError('STALE_HANDLE', `context ${contextId} was freed or made again since`);
      }
      unchangedSince(kv, bytes, contextId);
      this.registry.touch(contextId);
      const log: Eviction[] = [];
      await this.moves.promote(entry, log);
      await this.eviction.withRoom(
        'device',
        entry,
        () => this.appendBlocksNeeded(entry, bytes),
        () => this.pool.appendAsync(entry.handle, unchangedSince(kv, bytes, contextId)),
        log,
        'tier-and-pinned',
      );
      if (attachment) entry.attachment = attachment;
      // The last manifest stays until the next spill replaces it: an older durable copy
      // beats none if this process dies before then (the caller knows which version it trusts).
      await this.durable?.collectFreedDiskCopies();
      this.eviction.schedule();
      return log;
    });
  }

  /** Token-major bytes; pages only on disk are filled into memory first. */
  read(contextId: string, startToken: number, tokenCount: number): Promise<Uint8Array> {
    return this.inMemory(contextId, (handle) => this.pool.readAsync(handle, startToken, tokenCount));
  }

  /**
   * Writes the context's first `tokenCount` tokens into `file` laid out by `pieces`, natively and checked
   * page by page (NativeAllocator.writePlaneMajorAsync); pages only on disk are filled into memory first. Resolves
   * with the file's length.
   */
  writePlaneMajor(contextId: string, file: MemoryFile, tokenCount: number, pieces: readonly PlaneMajorPiece[]): Promise<number> {
    return this.inMemory(contextId, (handle) => this.pool.writePlaneMajorAsync(handle, file, 0, tokenCount, pieces));
  }

  /** Runs `use` under the context's lock once its pages are in memory (promoted first when only on disk). */
  private inMemory<T>(contextId: string, use: (handle: ContextHandle) => Promise<T>): Promise<T> {
    return this.locked(contextId, async (entry) => {
      this.registry.touch(contextId);
      if (this.tierOf(entry) === 'disk') await this.moves.promote(entry, []);
      return use(entry.handle);
    });
  }

  /** Demotes a context off the device: to host memory, or on to disk (spilled: durably, with a manifest). */
  demote(contextId: string, tier: 'host' | 'disk'): Promise<MoveReport> {
    return this.locked(contextId, async (entry) => {
      const from = this.tierOf(entry);
      const evictions: Eviction[] = [];
      // On its way to disk the context passes through host memory: only a stay there counts against the host quota.
      let bytes = await this.moves.demote(entry, evictions, tier === 'host' ? 'tier' : 'none');
      if (tier === 'disk') bytes = await this.moves.spill(entry, true);
      this.eviction.schedule();
      return { from, to: this.tierOf(entry), bytes, evictions };
    });
  }

  /** Spills: writes a durable copy (disk blocks and a manifest) while the context stays where it is. */
  spill(contextId: string): Promise<void> {
    return this.locked(contextId, async (entry) => {
      await this.moves.spill(entry, false);
    });
  }

  /** Promotes a context to the device from wherever its pages are (filled from disk, promoted from host). */
  promote(contextId: string): Promise<MoveReport> {
    return this.locked(contextId, async (entry) => {
      this.registry.touch(contextId);
      const from = this.tierOf(entry);
      const evictions: Eviction[] = [];
      const bytes = await this.moves.promote(entry, evictions);
      this.eviction.schedule();
      return { from, to: this.tierOf(entry), bytes, evictions };
    });
  }

  /**
   * Promotes as far as room that is free already takes the context, evicting nothing (a planned wake-up's
   * prefetch): to the device, or from disk to host memory only, or nowhere (TierMoves.promoteIntoFreeRoom).
   */
  promoteIntoFreeRoom(contextId: string): Promise<MoveReport> {
    return this.locked(contextId, async (entry) => {
      this.registry.touch(contextId);
      const from = this.tierOf(entry);
      const bytes = await this.moves.promoteIntoFreeRoom(entry);
      return { from, to: this.tierOf(entry), bytes, evictions: [] };
    });
  }

  /**
   * Adopts a context another process wrote to disk, from its manifest alone. Pass the tenant and the
   * newest version the caller knows of, so another tenant's or a replayed older manifest is refused.
   */
  async recover(contextId: string, options: ReadManifestOptions = {}): Promise<void> {
    const durable = this.moves.requireDurable();
    this.registry.requireNew(contextId);
    return this.registry.locks.run(contextId, async () => {
      this.registry.requireNew(contextId);
      this.registry.add(await durable.adopt(contextId, options));
    });
  }

  /**
   * Writes a recovered context's manifest again as the next version, once this process is its holder, so
   * that a former holder's write in flight is refused by the store (durable-copies.ts). When such a write
   * landed first, this copy is dropped and the call fails STALE_HANDLE: recover the newer version.
   */
  reseal(contextId: string): Promise<void> {
    return this.locked(contextId, async (entry) => {
      try {
        await this.moves.requireDurable().reseal(entry);
      } catch (err) {
        if (!(err instanceof ContextFenced)) throw err;
        await this.moves.drop(entry, false);
        throw new FabricError(
          'STALE_HANDLE',
          `context ${contextId} was written by its former holder during the adoption; this copy is dropped`,
        );
      }
    });
  }

  /**
   * Keeps the context where it is (counted: each pin needs its unpin). A first pin that takes its tenant
   * over its pinned quota is undone and refused RESOURCE_EXHAUSTED.
   */
  pin(contextId: string): void {
    const entry = this.registry.get(contextId);
    const wasPinned = this.pool.contextStats(entry.handle).pinCount > 0;
    this.pool.pin(entry.handle);
    if (wasPinned || !this.quotas || this.quotas.excess(entry.tenant, 'pinned', 0) <= 0) return;
    this.pool.unpin(entry.handle);
    const stats = this.pool.contextStats(entry.handle);
    throw this.quotas.refusal(contextId, entry.tenant, 'pinned', stats.devicePages + stats.hostPages);
  }

  unpin(contextId: string): void {
    this.pool.unpin(this.registry.get(contextId).handle);
  }

  /** Frees the context's blocks and, once unused, its disk copies and manifest. */
  release(contextId: string): Promise<void> {
    return this.locked(contextId, (entry) => this.moves.drop(entry, true));
  }

  /**
   * Frees this process's copy of the context but leaves its manifest and the segments it names: another
   * process has adopted the context from them (this one was fenced as a slow holder). `manifestStays`: the
   * caller knows the manifest stays as this copy read or wrote it (a cold prefix), so the segments it
   * names are not checked against every manifest (DurableCopies.released).
   */
  dropLocalCopy(contextId: string, options: { manifestStays?: boolean } = {}): Promise<void> {
    return this.locked(contextId, (entry) => this.moves.drop(entry, false, options.manifestStays === true));
  }

  /**
   * Deletes the durable copy of a context this process does not hold (its holder died and it cannot be
   * recovered, or it is being given up): the manifest, and the segments it names once nothing else
   * uses them. A manifest that cannot be read is deleted all the same, unless rewritten since it was
   * found so (STALE_HANDLE); its segments are then left to sweepOrphanSegments. A context this process
   * holds is released instead.
   */
  async discard(contextId: string): Promise<void> {
    if (this.registry.has(contextId)) return this.release(contextId);
    const durable = this.moves.requireDurable();
    return this.registry.locks.run(contextId, async () => {
      if (this.registry.has(contextId)) throw new FabricError('BUSY', `context ${contextId} was adopted while being discarded`);
      await durable.discard(contextId);
    });
  }

  /**
   * Deletes segments that no manifest names, nothing in this process uses, and that are older than
   * minAgeMs (default: the orphanMinAgeMs option; younger ones may belong to a spill still writing its
   * manifest), and retries deletions that failed before. For workers, at start and now and then: files
   * left by processes that died between a segment and its manifest. Returns how many it deleted.
   */
  sweepOrphanSegments(minAgeMs?: number): Promise<number> {
    const durable = this.moves.requireDurable();
    return durable.sweepOrphanSegments(minAgeMs ?? durable.orphanMinAgeMs);
  }

  // ---- inspection ----

  has(contextId: string): boolean {
    return this.registry.has(contextId);
  }

  residency(contextId: string): Tier {
    return this.tierOf(this.registry.get(contextId));
  }

  contextStats(contextId: string): ContextStats {
    return this.pool.contextStats(this.registry.get(contextId).handle);
  }

  /** Each page's checksum (TierPrimitives.pageChecksums): what the context's digest is taken over. */
  pageChecksums(contextId: string): Uint32Array {
    return this.pool.pageChecksums(this.registry.get(contextId).handle);
  }

  /** The allocator handle, for callers that use the pool directly (block tables for an engine). */
  handle(contextId: string): ContextHandle {
    return this.registry.get(contextId).handle;
  }

  /** The note last appended with the context (or adopted with it from disk). */
  attachment(contextId: string): ContextAttachment | undefined {
    return this.registry.get(contextId).attachment;
  }

  /** Version of the context's newest durable copy (0: none yet); recover() can demand at least this. */
  durableVersion(contextId: string): number {
    const entry = this.registry.get(contextId);
    return entry.manifest ? entry.version : 0;
  }

  contextIds(): string[] {
    return this.registry.ids();
  }

  /** Blocks each tenant holds in device and host memory, and pinned (forks' shared blocks once). */
  tenantBlocks(): TenantBlocks[] {
    return this.pool.tenantBlocks();
  }

  /** The tenant quotas' shares on this worker; undefined without quotas. */
  quotaShares(): TenantQuotaShares | undefined {
    return this.quotas && { ...this.quotas.shares };
  }

  stats(): TieredStats {
    return { ...this.pool.stats(), disk: this.durable?.stats() ?? { liveSegments: 0, blockCopies: 0, pendingDeletes: 0 } };
  }

  /** Resolves when background demotions scheduled so far have finished. */
  idle(): Promise<void> {
    return this.eviction.idle();
  }

  // ---- helpers ----

  /** Runs `operation` under the context's lock, on the entry registered when it starts. */
  private locked<T>(contextId: string, operation: (entry: ContextEntry) => Promise<T>): Promise<T> {
    return this.registry.locks.run(contextId, () => operation(this.registry.get(contextId)));
  }

  private appendBlocksNeeded(entry: ContextEntry, bytes: number): number {
    const { tokensPerBlock, bytesPerToken } = this.pool.layout;
    const stats = this.pool.contextStats(entry.handle);
    const tokens = stats.tokens + Math.floor(bytes / bytesPerToken);
    // A copy-on-write block may need one more; withRoom's retry evicts for it then.
    return Math.ceil(tokens / tokensPerBlock) - stats.blocks;
  }

  /** Where the pages are: an offloaded context whose pages a resident fork keeps on the device is 'device'. */
  private tierOf(entry: ContextEntry): Tier {
    const stats = this.pool.contextStats(entry.handle);
    if (stats.resident) return 'device';
    if (stats.diskOnlyPages > 0) return 'disk';
    if (stats.hostPages > 0 || stats.blocks === 0) return 'host';
    return 'device';
  }
}

/** kv as it was at the call, or INVALID_ARGUMENT (nothing appended) when its buffer was detached or resized since. */
function unchangedSince(kv: Uint8Array, bytes: number, contextId: string): Uint8Array {
  if (kv.byteLength !== bytes) {
    throw new FabricError(
      'INVALID_ARGUMENT',
      `the bytes to append to ${contextId} were detached or resized before the append ran ` +
        `(${bytes} bytes at the call, ${kv.byteLength} now); nothing was appended`,
    );
  }
  return kv;
}
