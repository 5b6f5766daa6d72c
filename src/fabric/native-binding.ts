// Loads the compiled addon once and hands it FabricError, so native failures are the same typed errors
// as TypeScript ones. KVFABRIC_ADDON points at another build (the ASan one, say).
import fs from 'node:fs';
import path from 'node:path';

import { FabricError } from './errors';
import type { BackendInfo, BlockLayout, ContextStats, IpcChunk, PoolStats } from './types';

/** The addon's pool object; NativeAllocator is its only user. */
export interface NativePool {
  layout(): BlockLayout;
  createContext(tenant: number): number;
  append(ctx: number, kv: Uint8Array): void;
  appendAsync(ctx: number, kv: Uint8Array): Promise<void>;
  read(ctx: number, startToken: number, tokenCount: number): Uint8Array;
  readAsync(ctx: number, startToken: number, tokenCount: number): Promise<Uint8Array>;
  readBlock(ctx: number, pageIndex: number): Uint8Array;
  fork(ctx: number): number;
  pin(ctx: number): void;
  unpin(ctx: number): void;
  release(ctx: number): void;
  blockTable(ctx: number): Uint32Array;
  stats(): PoolStats;
  contextStats(ctx: number): ContextStats;
  allocateBlocks(tenant: number, count: number): Float64Array;
  freeBlocks(handles: Float64Array): void;
  close(): void;
  demoteAsync(ctx: number): Promise<void>;
  promoteAsync(ctx: number): Promise<void>;
  beginSpill(ctx: number): { lease: number; blocks: number };
  spillRead(lease: number, index: number): Uint8Array;
  commitSpill(lease: number, diskKeys: Float64Array, dropHostFrames: boolean): void;
  beginFill(ctx: number, target?: 'host' | 'device'): { lease: number; diskKeys: Float64Array };
  fillWrite(lease: number, index: number, bytes: Uint8Array): void;
  commitFill(lease: number): void;
  abortLease(lease: number): void;
  importContext(tenant: number, tokens: number, diskKeys: Float64Array): number;
  takeFreedDiskKeys(): Float64Array;
  pageDiskKeys(ctx: number): Float64Array;
  pageTiers(ctx: number): Uint8Array;
  forgetDiskCopies(ctx: number, diskKeys: Float64Array): void;
  backendInfo(): BackendInfo;
  blockDeviceAddresses(ctx: number): BigUint64Array;
  exportIpcHandles(): IpcChunk[];
}

/** Whether a CUDA device is usable by this process, and if not why. */
export interface CudaProbe {
  usable: boolean;
  name?: string;
  reason?: string;
}

/** One figure of the transfer benchmark (bench/transfer.bench.ts). */
export interface TransferFigure {
  way: 'contiguous' | 'copies' | 'kernel';
  direction: 'd2h' | 'h2d' | 'duplex';
  blockBytes: number;
  bytes: number;
  seconds?: number;
  gbps?: number;
  skipped?: string;
}

interface NativeBinding {
  NativePool: new (options: object) => NativePool;
  registerErrorClass(errorClass: typeof FabricError): void;
  cudaProbe(device?: number): CudaProbe;
  cudaTransferBench(options: { device: number; totalBytes: number; blockBytes: number[]; repeats: number }): {
    deviceName: string;
    kernel: string;
    figures: TransferFigure[];
  };
  abiVersion: number;
}

const EXPECTED_ABI = 2;
let binding: NativeBinding | undefined;

function packageRoot(): string {
  for (let dir = __dirname; ; dir = path.dirname(dir)) {
    if (fs.existsSync(path.join(dir, 'native', 'CMakeLists.txt'))) return dir;
    if (path.dirname(dir) === dir) throw new FabricError('UNAVAILABLE', 'cannot find the kvfabric package root');
  }
}

export function addonPath(): string {
  return process.env.KVFABRIC_ADDON ?? path.join(packageRoot(), 'build', 'native', 'kvfabric.node');
}

export function loadNativeBinding(): NativeBinding {
  if (binding) return binding;
  const file = addonPath();
  let loaded: NativeBinding;
  try {
    loaded = require(file) as NativeBinding;
  } catch (err) {
    throw new FabricError(
      'UNAVAILABLE',
      `the native addon could not be loaded from ${file} (${(err as Error).message}); build it with npm run build:native`,
    );
  }
  if (loaded.abiVersion !== EXPECTED_ABI) {
    throw new FabricError('UNAVAILABLE', `addon at ${file} is ABI ${loaded.abiVersion}, expected ${EXPECTED_ABI}: rebuild it`);
  }
  loaded.registerErrorClass(FabricError);
  binding = loaded;
  return loaded;
}
