// The allocator's public contract. NativeAllocator (the addon) honours it, and so does a plain TypeScript
// twin in test/fabric/ts-allocator.ts: a baseline in benchmarks and a second implementation under the
// same tests.

import type { Tier } from './tier';

/** Shape of one model's KV cache; the bytes of one token are layers x 2 (K and V) x kvHeads x headDim x dtypeBytes. */
export interface ModelShape {
  layers: number;
  kvHeads: number;
  headDim: number;
  dtypeBytes: number;
}

/**
 * When a freed block is zeroed, always lazily (when it is handed out again, and only where its new owner
 * does not overwrite it at once): `always` (the default) before any other context receives it,
 * `on-tenant-change` only before a different tenant's does.
 */
export type ScrubPolicy = 'on-tenant-change' | 'always';

/**
 * Where the device tier lives. `cpu`: host memory. `cuda`: GPU memory (NativeAllocator only; UNAVAILABLE
 * naming the reason when no usable driver or device). `auto`: CUDA when a device is usable, else CPU.
 */
export type Backend = 'auto' | 'cpu' | 'cuda';

/** Which backend a pool got, and why (docs/cuda.md). */
export interface BackendInfo {
  kind: 'cpu' | 'cuda';
  /** CUDA: the device index and its name. */
  device?: number;
  name?: string;
  /** `auto` that fell back to the CPU: why CUDA was not usable. */
  reason?: string;
  /** How tier moves copy: `kernel`, `copies` (with why not the kernel) or `host memcpy`. */
  transfer: string;
  /**
   * Where a restore's page checksums are computed: `device kernel` (CUDA, on the GPU, where the bytes
   * landed), `host (why not the kernel)` (CUDA, the pinned side by the CPU) or `host` (the CPU backend).
   */
  checksums: string;
}

/** One CUDA IPC handle per device allocation ("chunk") of the pool, for another process on the same GPU. */
export interface IpcChunk {
  /** cuIpcGetMemHandle's 64 bytes; map with cuIpcOpenMemHandle. */
  handle: Uint8Array;
  bytes: number;
  /** Frame (device block index) at offset 0 of the chunk; frame f is at (f - firstFrame) * blockBytes. */
  firstFrame: number;
  frames: number;
}

export interface PoolOptions {
  shape: ModelShape;
  /**
   * Number of device-tier blocks carved from the backing allocations. On CUDA with
   * deviceMemoryFraction, that fraction sizes the device tier instead and blockCount is the CPU size.
   */
  blockCount: number;
  /** Default `auto`; for NativeAllocator the environment variable KVFABRIC_BACKEND overrides the default. */
  backend?: Backend;
  /** CUDA device index (default 0). */
  device?: number;
  /** CUDA only: size the device tier as this fraction, in (0, 1], of the device's free memory. */
  deviceMemoryFraction?: number;
  /** Host-tier blocks (pinned host memory on CUDA) that offloaded contexts move to (default 0: none). */
  hostBlockCount?: number;
  /** Tokens per block (default 16). */
  tokensPerBlock?: number;
  /**
   * `always` (default): a frame is zeroed before any other context gets it. `on-tenant-change`: only
   * before another tenant's does (a tenant's new contexts may read its released ones); for benchmarks.
   */
  scrub?: ScrubPolicy;
  /** Upper bound on live contexts (default 1,048,576). */
  maxContexts?: number;
  /**
   * Check every block a tier move copies against its checksum (default true). Off only to measure what
   * the check costs (bench/tiers.bench.ts); a move then trusts the bytes it copies.
   */
  verifyMoves?: boolean;
}

/**
 * Block-major layout: block b is one contiguous extent at b * blockBytes. Inside a block the bytes are
 * planes ordered [layer][K=0,V=1], each plane holding tokensPerBlock slots of tokenPlaneBytes
 * (kvHeads x headDim x dtypeBytes) -- the per-layer shape paged-attention kernels read.
 * Token bytes passed to append/read are token-major: [token][layer][K,V][head][dim].
 */
export interface BlockLayout {
  tokensPerBlock: number;
  bytesPerToken: number;
  blockBytes: number;
  planes: number;
  planeBytes: number;
  tokenPlaneBytes: number;
}

/** Generation-checked context handle: generation * 2^32 + slot. A released handle is never valid again. */
export type ContextHandle = number;
/** Generation-checked block handle: generation * 2^32 + block index. */
export type BlockHandle = number;
/** Tenant id: an integer in [1, 2^32 - 1]. */
export type TenantId = number;

export interface TierStats {
  totalBlocks: number;
  freeBlocks: number;
  usedBlocks: number;
}

/** Block counts and bytes are the device tier's; sharing, waste and contexts are pool-wide. */
export interface PoolStats {
  totalBlocks: number;
  freeBlocks: number;
  usedBlocks: number;
  /** Blocks referenced more than once (shared by forks). */
  sharedBlocks: number;
  blockBytes: number;
  totalBytes: number;
  usedBytes: number;
  freeBytes: number;
  contexts: number;
  /** Bytes of allocated but unfilled token slots, counted once per block. */
  wasteBytes: number;
  host: TierStats;
  /** Blocks whose only copy is on disk. */
  diskOnlyBlocks: number;
  /** Blocks with a clean copy on disk, wherever else they are. */
  diskCopies: number;
}

/** One tenant's blocks in memory, each counted once however many of its contexts (forks) share it. */
export interface TenantBlocks {
  tenant: TenantId;
  device: number;
  host: number;
  /** Device and host blocks of the tenant's pinned contexts. */
  pinned: number;
}

export interface ContextStats {
  tenant: TenantId;
  tokens: number;
  blocks: number;
  sharedBlocks: number;
  pinCount: number;
  /** tokens x bytesPerToken */
  bytes: number;
  /** Unfilled slots in this context's blocks, in bytes. */
  wasteBytes: number;
  /** Resident: every page on the device, ready to append and read. Otherwise offloaded. */
  resident: boolean;
  devicePages: number;
  hostPages: number;
  diskOnlyPages: number;
  /** Pages whose block has a disk copy. */
  diskCopies: number;
}

/**
 * A file that lives only in this process's memory (a Linux memfd), kept mapped between writes: what a
 * context is written into for an engine that loads files by path. Its pages stay allocated until
 * close(), so writing it again costs a copy; it only grows, and bytes past what the last write laid out
 * are left from earlier writes (a reader takes the length the write resolved with).
 */
export interface MemoryFile {
  /** /proc/self/fd/N: opens the file in this process only; empty once closed. */
  readonly path: string;
  /** Bytes allocated, a multiple of 2 MiB. */
  readonly capacity: number;
  /** Frees its memory; BUSY while a write runs. */
  close(): void;
}

/**
 * One piece of a file that writePlaneMajorAsync lays out, in file order: literal bytes (headers), or
 * the rows of every read token in one block plane (plane = layer x 2 + {K: 0, V: 1}), one row of
 * kvHeads x headDim x dtypeBytes per token; with elementBytes, the plane element-transposed instead
 * (element e of token t at e x tokenCount + t, each elementBytes long).
 */
export type PlaneMajorPiece = { bytes: Uint8Array } | { plane: number; elementBytes?: number };

export interface KvAllocator {
  readonly layout: BlockLayout;
  readonly scrubPolicy: ScrubPolicy;
  createContext(tenant: TenantId): ContextHandle;
  /** Appends whole tokens (kv.length must be a multiple of bytesPerToken). All or nothing. */
  append(ctx: ContextHandle, kv: Uint8Array): void;
  /**
   * append off the event loop. kv is read while the promise is pending, a piece at a time: detaching or
   * resizing its buffer meanwhile fails it with INVALID_ARGUMENT, and nothing is appended.
   */
  appendAsync(ctx: ContextHandle, kv: Uint8Array): Promise<void>;
  /** Token-major bytes of tokens [startToken, startToken + tokenCount). */
  read(ctx: ContextHandle, startToken: number, tokenCount: number): Uint8Array;
  readAsync(ctx: ContextHandle, startToken: number, tokenCount: number): Promise<Uint8Array>;
  /** The raw bytes (block layout) of the context's pageIndex-th block, unfilled slots included. */
  readBlock(ctx: ContextHandle, pageIndex: number): Uint8Array;
  /** A new context of the same tenant sharing every block of ctx; either side copies on write. */
  fork(ctx: ContextHandle): ContextHandle;
  pin(ctx: ContextHandle): void;
  unpin(ctx: ContextHandle): void;
  release(ctx: ContextHandle): void;
  /** Device block indices (frames) of the context's page table, in token order; the context must be resident. */
  blockTable(ctx: ContextHandle): Uint32Array;
  stats(): PoolStats;
  contextStats(ctx: ContextHandle): ContextStats;
  /** Engine-managed blocks outside any context: all or nothing. */
  allocateBlocks(tenant: TenantId, count: number): Float64Array;
  /** Frees blocks from allocateBlocks; the whole batch is validated before any is freed. */
  freeBlocks(handles: Float64Array): void;
  close(): void;
}

/**
 * Tier movement primitives of the native allocator, used by the tiered memory layer (src/tiers).
 * Leases that span the disk tier's I/O are numbered; an open lease holds its context BUSY.
 */
export interface TierPrimitives {
  /**
   * A fork of the first `blocks` pages only, each full (OUT_OF_RANGE otherwise): a prefix shared by
   * reference without the pages after it (src/prefix-sharing), copy on write as any fork.
   */
  forkPrefix(ctx: ContextHandle, blocks: number): ContextHandle;
  /** Resident -> offloaded: blocks no other resident context uses move to the host tier. */
  demote(ctx: ContextHandle): Promise<void>;
  /** Offloaded -> resident: host blocks move to the device. Pages only on disk must be filled first. */
  promote(ctx: ContextHandle): Promise<void>;
  /**
   * Writes tokens [startToken, startToken + tokenCount) into `file` laid out by `pieces` (in file order:
   * literal bytes, and every block plane's rows once), off the event loop, checking each page against
   * its checksum as it reads it (INTEGRITY, naming the page, otherwise). No token-major copy is made and
   * no byte passes through JavaScript. Resolves with the file's length in bytes; pages only on disk are
   * INVALID_STATE (restore first), a file being written BUSY.
   */
  writePlaneMajorAsync(
    ctx: ContextHandle,
    file: MemoryFile,
    startToken: number,
    tokenCount: number,
    pieces: readonly PlaneMajorPiece[],
  ): Promise<number>;
  /** Blocks of ctx without a disk copy, to be written by the disk tier. */
  beginSpill(ctx: ContextHandle): { lease: number; blocks: number };
  /** One spilled block's bytes: a new buffer, or copied into `into` (exactly one block) and returned. */
  spillRead(lease: number, index: number, into?: Uint8Array): Uint8Array;
  /** One non-zero disk key per spilled block; dropHostFrames frees host frames of an offloaded context. */
  commitSpill(lease: number, diskKeys: Float64Array, dropHostFrames: boolean): void;
  /**
   * Disk-only blocks of an offloaded context get host frames (or, with target 'device', device frames:
   * only for a context with no page in host memory, and its commit makes the context resident);
   * fillWrite their bytes in diskKeys order.
   */
  beginFill(ctx: ContextHandle, target?: 'host' | 'device'): { lease: number; diskKeys: Float64Array };
  fillWrite(lease: number, index: number, bytes: Uint8Array): void;
  commitFill(lease: number): void;
  abortLease(lease: number): void;
  /**
   * An offloaded context whose pages are only on disk: a restore in a new process. checksums (one per
   * page, from the manifest) are what each page's fill is checked against.
   */
  importContext(tenant: TenantId, tokens: number, diskKeys: Float64Array, checksums: Uint32Array): ContextHandle;
  /** Disk keys of blocks freed (or rewritten) since the last call: their disk copies can be deleted. */
  takeFreedDiskKeys(): Float64Array;
  /** Each page's disk key, 0 where the page has no disk copy. */
  pageDiskKeys(ctx: ContextHandle): Float64Array;
  /** Forgets disk copies whose files are gone so the next spill rewrites them; INTEGRITY if one was a page's only copy. */
  forgetDiskCopies(ctx: ContextHandle, diskKeys: Float64Array): void;
  /** Each page's residency. */
  pageResidency(ctx: ContextHandle): Tier[];
  /**
   * Each page's checksum: CRC-32C of its tokens' bytes in token-major order, kept by the appends that
   * wrote them and checked by every tier move that copies the page (a mismatch fails the move with
   * INTEGRITY naming the page).
   */
  pageChecksums(ctx: ContextHandle): Uint32Array;
  /** Every tenant holding blocks in device or host memory, by tenant id (what quotas are judged by). */
  tenantBlocks(): TenantBlocks[];
}

export type { Tier } from './tier';
