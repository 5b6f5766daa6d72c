// The native allocator behind the KvAllocator contract: options are checked here with the same rules
// as TsAllocator, then every call goes straight to the addon, which checks arguments again (plain-JS
// callers bypass TypeScript) and throws FabricError itself.
import { requireBackend, validatePoolOptions } from './layout';
import { loadNativeBinding, type NativePool } from './native-binding';
import type {
  Backend,
  BackendInfo,
  BlockLayout,
  ContextHandle,
  ContextStats,
  KvAllocator,
  PoolOptions,
  IpcChunk,
  PoolStats,
  ScrubPolicy,
  TenantId,
  Tier,
  TierPrimitives,
} from './types';

/** Indexed by the native Tier enum: kNone = 0 (only the disk copy), kDevice = 1, kHost = 2. */
const PAGE_RESIDENCY: readonly Tier[] = ['disk', 'device', 'host'];

/** The backend when options name none: KVFABRIC_BACKEND (so one env var moves a whole test run), else auto. */
export function defaultBackend(): Backend {
  const env = process.env.KVFABRIC_BACKEND;
  return env === undefined || env === '' ? 'auto' : requireBackend(env, 'KVFABRIC_BACKEND');
}

function withDefaultBackend(options: PoolOptions): PoolOptions {
  if (typeof options !== 'object' || options === null || options.backend !== undefined) return options;
  return { ...options, backend: defaultBackend() };
}

/** Whether CUDA device `device` is usable here, and if not why (the addon's probe; never throws for CUDA). */
export function probeCuda(device = 0): { usable: boolean; name?: string; reason?: string } {
  return loadNativeBinding().cudaProbe(device);
}

export class NativeAllocator implements KvAllocator, TierPrimitives {
  readonly layout: BlockLayout;
  readonly scrubPolicy: ScrubPolicy;
  /** Which backend this pool got (cpu or cuda) and why. */
  readonly backendInfo: BackendInfo;
  private readonly pool: NativePool;

  constructor(options: PoolOptions) {
    const normalized = validatePoolOptions(withDefaultBackend(options));
    const { NativePool } = loadNativeBinding();
    this.pool = new NativePool({
      ...normalized.shape,
      tokensPerBlock: normalized.tokensPerBlock,
      blockCount: normalized.blockCount,
      hostBlockCount: normalized.hostBlockCount,
      maxContexts: normalized.maxContexts,
      scrub: normalized.scrub,
      backend: normalized.backend,
      device: normalized.device,
      deviceMemoryFraction: normalized.deviceMemoryFraction,
    });
    this.layout = Object.freeze(this.pool.layout());
    this.backendInfo = Object.freeze(this.pool.backendInfo());
    this.scrubPolicy = normalized.scrub;
  }

  createContext(tenant: TenantId): ContextHandle {
    return this.pool.createContext(tenant);
  }
  append(ctx: ContextHandle, kv: Uint8Array): void {
    this.pool.append(ctx, kv);
  }
  appendAsync(ctx: ContextHandle, kv: Uint8Array): Promise<void> {
    return this.pool.appendAsync(ctx, kv);
  }
  read(ctx: ContextHandle, startToken: number, tokenCount: number): Uint8Array {
    return this.pool.read(ctx, startToken, tokenCount);
  }
  readAsync(ctx: ContextHandle, startToken: number, tokenCount: number): Promise<Uint8Array> {
    return this.pool.readAsync(ctx, startToken, tokenCount);
  }
  readBlock(ctx: ContextHandle, pageIndex: number): Uint8Array {
    return this.pool.readBlock(ctx, pageIndex);
  }
  fork(ctx: ContextHandle): ContextHandle {
    return this.pool.fork(ctx);
  }
  pin(ctx: ContextHandle): void {
    this.pool.pin(ctx);
  }
  unpin(ctx: ContextHandle): void {
    this.pool.unpin(ctx);
  }
  release(ctx: ContextHandle): void {
    this.pool.release(ctx);
  }
  blockTable(ctx: ContextHandle): Uint32Array {
    return this.pool.blockTable(ctx);
  }
  stats(): PoolStats {
    return this.pool.stats();
  }
  contextStats(ctx: ContextHandle): ContextStats {
    return this.pool.contextStats(ctx);
  }
  allocateBlocks(tenant: TenantId, count: number): Float64Array {
    return this.pool.allocateBlocks(tenant, count);
  }
  freeBlocks(handles: Float64Array): void {
    this.pool.freeBlocks(handles);
  }
  close(): void {
    this.pool.close();
  }

  /** CUDA: each page's block as a device address (an engine's block table); INVALID_STATE on CPU or offloaded. */
  blockDeviceAddresses(ctx: ContextHandle): BigUint64Array {
    return this.pool.blockDeviceAddresses(ctx);
  }
  /** CUDA: the pool's device allocations as IPC handles another process on the same GPU can map. */
  exportIpcHandles(): IpcChunk[] {
    return this.pool.exportIpcHandles();
  }

  demote(ctx: ContextHandle): Promise<void> {
    return this.pool.demoteAsync(ctx);
  }
  promote(ctx: ContextHandle): Promise<void> {
    return this.pool.promoteAsync(ctx);
  }
  beginSpill(ctx: ContextHandle): { lease: number; blocks: number } {
    return this.pool.beginSpill(ctx);
  }
  spillRead(lease: number, index: number): Uint8Array {
    return this.pool.spillRead(lease, index);
  }
  commitSpill(lease: number, diskKeys: Float64Array, dropHostFrames: boolean): void {
    this.pool.commitSpill(lease, diskKeys, dropHostFrames);
  }
  beginFill(ctx: ContextHandle, target: 'host' | 'device' = 'host'): { lease: number; diskKeys: Float64Array } {
    return this.pool.beginFill(ctx, target);
  }
  fillWrite(lease: number, index: number, bytes: Uint8Array): void {
    this.pool.fillWrite(lease, index, bytes);
  }
  commitFill(lease: number): void {
    this.pool.commitFill(lease);
  }
  abortLease(lease: number): void {
    this.pool.abortLease(lease);
  }
  importContext(tenant: TenantId, tokens: number, diskKeys: Float64Array): ContextHandle {
    return this.pool.importContext(tenant, tokens, diskKeys);
  }
  takeFreedDiskKeys(): Float64Array {
    return this.pool.takeFreedDiskKeys();
  }
  pageDiskKeys(ctx: ContextHandle): Float64Array {
    return this.pool.pageDiskKeys(ctx);
  }
  forgetDiskCopies(ctx: ContextHandle, diskKeys: Float64Array): void {
    this.pool.forgetDiskCopies(ctx, diskKeys);
  }
  pageResidency(ctx: ContextHandle): Tier[] {
    return Array.from(this.pool.pageTiers(ctx), (tier) => PAGE_RESIDENCY[tier] ?? 'disk');
  }
}
