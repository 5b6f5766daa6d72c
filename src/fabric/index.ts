// Public entry of the allocator API: NativeAllocator (the C++ pool, CPU or CUDA backend) and its types.
export * from './errors';
export * from './types';
export { bytesPerTokenOf, computeLayout, validatePoolOptions } from './layout';
export { crc32c } from './checksum';
export { createMemoryFile } from './memory-file';
export { defaultBackend, NativeAllocator, probeCuda } from './native-allocator';
export { isDeeper, TIER_DEPTH } from './tier';
