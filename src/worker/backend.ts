// Which memory backs the device tier. Only host memory exists today (the CPU backend); the CUDA backend
// plugs in here when the allocator gains it, behind the same NativeAllocator API.
import { FabricError } from '../fabric/errors';
import { NativeAllocator } from '../fabric/native-allocator';
import type { PoolOptions } from '../fabric/types';
import type { Backend } from './config';

export function createPool(backend: Backend, options: PoolOptions): { pool: NativeAllocator; backend: 'cpu' } {
  if (backend === 'cuda') {
    throw new FabricError('UNAVAILABLE', 'the CUDA backend is not built yet: the allocator serves host memory only; use --backend cpu or auto');
  }
  // auto: CUDA when the allocator offers it and a device is present; until then, the CPU backend.
  return { pool: new NativeAllocator(options), backend: 'cpu' };
}
