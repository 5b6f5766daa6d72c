// Every export of the native addon (native/src/addon/addon.cc, pool_wrap.cc, memory_file_wrap.cc, aes_gcm.cc), declared once
// with its exact signature. The addon is loaded only through loadNativeBinding() (native-binding.ts),
// which returns NativeAddon. test/fabric/native-surface.test.ts reads this file's declarations and
// compares them with the loaded addon, member by member, so an export added or removed on either side
// fails it. The public API is src/fabric/index.ts; what is marked @internal here is used only inside
// the package (the loader, the cold tier's crypto threads, the transfer benchmark).
import type { FabricError } from './errors';
import type {
  Backend,
  BackendInfo,
  BlockLayout,
  ContextHandle,
  IpcChunk,
  KvAllocator,
  MemoryFile,
  ScrubPolicy,
  TierPrimitives,
} from './types';

/**
 * The pool's options as the addon reads them: the model shape flattened in, every other field optional
 * with the addon's own default. NativeAllocator checks PoolOptions first and passes this.
 */
export interface NativePoolOptions {
  layers: number;
  kvHeads: number;
  headDim: number;
  dtypeBytes: number;
  blockCount: number;
  tokensPerBlock?: number;
  hostBlockCount?: number;
  maxContexts?: number;
  scrub?: ScrubPolicy;
  backend?: Backend;
  device?: number;
  deviceMemoryFraction?: number;
  verifyMoves?: boolean;
}

/**
 * The addon's pool class (one PagedAllocator): the allocator contract and the tier primitives as types.ts
 * states them (NativeAllocator extends this class, with no forwarding layer), plus the native calls that
 * NativeAllocator turns into properties or friendlier types. Every method throws FabricError, async ones
 * reject with it.
 */
export interface NativePool extends Omit<KvAllocator, 'layout' | 'scrubPolicy'>, Omit<TierPrimitives, 'pageResidency'> {
  blockLayout(): BlockLayout;
  /** Each page's native tier: 0 only on disk, 1 device, 2 host (NativeAllocator.pageResidency names them). */
  pageTiers(ctx: ContextHandle): Uint8Array;
  describeBackend(): BackendInfo;
  /** CUDA: each page's block as a device address (an engine's block table); INVALID_STATE on CPU or offloaded. */
  blockDeviceAddresses(ctx: ContextHandle): BigUint64Array;
  /** CUDA: the pool's device allocations as IPC handles another process on the same GPU can map. */
  exportIpcHandles(): IpcChunk[];
}

/** Whether a CUDA device is usable by this process, and if not why. */
export interface CudaProbe {
  usable: boolean;
  name?: string;
  reason?: string;
}

/** What the transfer benchmark measures (bench/transfer.bench.ts). */
export interface TransferBenchOptions {
  device: number;
  totalBytes: number;
  blockBytes: number[];
  repeats: number;
}

/** One figure of the transfer benchmark. */
export interface TransferFigure {
  way: 'contiguous' | 'copies' | 'kernel';
  direction: 'd2h' | 'h2d' | 'duplex';
  blockBytes: number;
  bytes: number;
  seconds?: number;
  gbps?: number;
  skipped?: string;
}

export interface TransferBenchResult {
  deviceName: string;
  /** `ready`, or why the gather/scatter kernel is not. */
  kernel: string;
  figures: TransferFigure[];
}

/** One byte range of an AES-256-GCM job over a buffer, with its own 12-byte IV and associated data. */
export interface GcmSealItem {
  offset: number;
  length: number;
  iv: Uint8Array;
  aad: Uint8Array;
}

/** A range to decrypt and verify against its 16-byte tag. */
export interface GcmOpenItem extends GcmSealItem {
  tag: Uint8Array;
}

export interface NativeAddon {
  /** @internal The pool class; the public one is NativeAllocator, which extends it. */
  NativePool: new (
    options: NativePoolOptions,
  ) => NativePool;
  /** A memory file named `name` (shown in /proc/self/fd); UNAVAILABLE where the system has no memfd. */
  MemoryFile: new (
    name: string,
  ) => MemoryFile;
  /** @internal The loader hands over FabricError once, so native failures are thrown as that class. */
  registerErrorClass(errorClass: typeof FabricError): void;
  /** Never throws for CUDA's sake: an unusable device is `usable: false` with the reason. */
  cudaProbe(device?: number): CudaProbe;
  /** CRC-32C of bytes, continuing from `previous` (0 to start). */
  crc32c(bytes: Uint8Array, previous?: number): number;
  /** @internal Synchronous, seconds to minutes: only for the benchmark process. */
  cudaTransferBench(options: TransferBenchOptions): TransferBenchResult;
  /** @internal Whether gcmSeal and gcmOpen are exported: the process's OpenSSL offers what they call. */
  gcmAvailable: boolean;
  /**
   * @internal Encrypts each item of `bytes` in place with a 32-byte key; returns the 16-byte tags, one
   * per item in order. UNAVAILABLE if OpenSSL refuses.
   */
  gcmSeal?(key: Uint8Array, bytes: Uint8Array, items: GcmSealItem[]): Uint8Array;
  /**
   * @internal Decrypts and verifies each item in place: -1, or the first item whose tag failed, and then
   * every item's bytes are zeroed, so unverified plaintext is never left behind.
   */
  gcmOpen?(key: Uint8Array, bytes: Uint8Array, items: GcmOpenItem[]): number;
  /** @internal The binary interface's version, which the loader checks. */
  abiVersion: number;
}
