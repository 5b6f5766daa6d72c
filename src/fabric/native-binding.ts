// Loads the compiled addon once and hands it FabricError, so native failures are the same typed errors
// as TypeScript ones. KVFABRIC_ADDON points at another build (the ASan one, say).
import fs from 'node:fs';
import path from 'node:path';

import { FabricError } from './errors';
import type { BackendInfo, BlockLayout, ContextHandle, IpcChunk, KvAllocator, TierPrimitives } from './types';

/**
 * The addon's pool class, declared once: the allocator contract and the tier primitives as they are
 * (NativeAllocator extends this class, so there is no forwarding layer), plus the few native calls that
 * NativeAllocator turns into properties or friendlier types.
 */
export interface NativePool extends Omit<KvAllocator, 'layout' | 'scrubPolicy'>, Omit<TierPrimitives, 'pageResidency'> {
  blockLayout(): BlockLayout;
  describeBackend(): BackendInfo;
  /** Each page's native tier: 0 only on disk, 1 device, 2 host. */
  pageTiers(ctx: ContextHandle): Uint8Array;
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
  crc32c(bytes: Uint8Array, previous?: number): number;
  cudaTransferBench(options: { device: number; totalBytes: number; blockBytes: number[]; repeats: number }): {
    deviceName: string;
    kernel: string;
    figures: TransferFigure[];
  };
  abiVersion: number;
}

const EXPECTED_ABI = 3;
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
