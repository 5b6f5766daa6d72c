// The checksum every page carries (native/src/core/block_checksum.h): CRC-32C of its tokens' bytes in
// token-major order. TypeScript needs it only for a page's first few tokens (a digest of a prefix that
// ends inside a page); the allocator keeps and checks the rest itself.
import { loadNativeBinding } from './native-binding';

/** CRC-32C of bytes, continuing from `previous` (the CRC of what came before them; 0 to start). */
export function crc32c(bytes: Uint8Array, previous = 0): number {
  return loadNativeBinding().crc32c(bytes, previous);
}
