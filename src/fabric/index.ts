// Public entry of the allocator API: pick an implementation by backend and use it through KvAllocator.
import { FabricError } from './errors';
import { NativeAllocator } from './native-allocator';
import { TsAllocator } from './ts-allocator';
import type { KvAllocator, PoolOptions } from './types';

export * from './errors';
export * from './types';
export { computeLayout, validatePoolOptions } from './layout';
export { defaultBackend, NativeAllocator, probeCuda } from './native-allocator';
export { TsAllocator } from './ts-allocator';

/** `native`: the C++ pool (CPU or CUDA backend, PoolOptions.backend). `ts`: the pure-TypeScript baseline (CPU). */
export type AllocatorImplementation = 'native' | 'ts';

export function createAllocator(options: PoolOptions, implementation: AllocatorImplementation = 'native'): KvAllocator {
  switch (implementation) {
    case 'native':
      return new NativeAllocator(options);
    case 'ts':
      return new TsAllocator(options);
    default:
      throw new FabricError('INVALID_ARGUMENT', `unknown allocator implementation ${String(implementation)}`);
  }
}
