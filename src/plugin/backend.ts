// Which memory backs the device tier: the worker's --backend (auto, cpu, cuda) and --device go to the
// allocator, which loads the CUDA driver at run time (docs/cuda.md). `auto` falls back to the CPU, and
// says why; `cuda` without a usable device fails at start, naming the reason.
import { NativeAllocator } from '../fabric/native-allocator';
import type { BackendInfo, PoolOptions } from '../fabric/types';

export function createPool(options: PoolOptions): { pool: NativeAllocator; backend: BackendInfo } {
  const pool = new NativeAllocator(options);
  return { pool, backend: pool.backendInfo };
}
