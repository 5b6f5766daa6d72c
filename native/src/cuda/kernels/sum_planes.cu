// Page checksums on the device: the CRC-32C of a block's first `fill` tokens in token-major order
// (BlockChecksum::of's value), computed where the bytes landed, so a restore is checked without the
// CPU reading them. One thread per (block, plane) walks that plane's token pieces, which lie contiguous
// in block layout: s = crc32c(shift(s), piece), the shift carrying s past the other planes' pieces of a
// token. The host joins a block's plane sums in plane order (BlockChecksum::joinPlanes). Self-contained
// (NVRTC compiles it alone); kernel_host_shim.h compiles it as C++ for the stand-in driver and tests.
//   tables: [8][256] CRC-32C slicing tables, then [4][256] for the shift past a token's other planes.
typedef unsigned char kvf_u8;
typedef unsigned int kvf_u32;
typedef unsigned long long kvf_u64;

__device__ inline kvf_u32 kvf_shift(const kvf_u32* shift, kvf_u32 s) {
  return shift[s & 255] ^ shift[256 + ((s >> 8) & 255)] ^ shift[512 + ((s >> 16) & 255)] ^ shift[768 + (s >> 24)];
}

// crc32c(crc, bytes): the CRC continued over n bytes; 8-byte loads (slicing by 8) once aligned.
__device__ inline kvf_u32 kvf_crc32c(const kvf_u32* slice, kvf_u32 crc, const kvf_u8* bytes, kvf_u64 n) {
  kvf_u32 r = ~crc;
  kvf_u64 i = 0;
  for (; i < n && ((kvf_u64)(bytes + i) & 7) != 0; ++i) r = slice[(r ^ bytes[i]) & 255] ^ (r >> 8);
  for (; i + 8 <= n; i += 8) {
    const kvf_u64 w = *reinterpret_cast<const kvf_u64*>(bytes + i);  // little-endian, as on the host
    const kvf_u32 lo = r ^ (kvf_u32)w;
    const kvf_u32 hi = (kvf_u32)(w >> 32);
    r = slice[7 * 256 + (lo & 255)] ^ slice[6 * 256 + ((lo >> 8) & 255)] ^ slice[5 * 256 + ((lo >> 16) & 255)] ^
        slice[4 * 256 + (lo >> 24)] ^ slice[3 * 256 + (hi & 255)] ^ slice[2 * 256 + ((hi >> 8) & 255)] ^
        slice[1 * 256 + ((hi >> 16) & 255)] ^ slice[hi >> 24];
  }
  for (; i < n; ++i) r = slice[(r ^ bytes[i]) & 255] ^ (r >> 8);
  return ~r;
}

// blocks[b]: block b's device address; fills[b]: its filled tokens. planeSums[b * planes + p] out.
extern "C" __global__ void kvf_sum_planes(const kvf_u64* blocks, const kvf_u32* fills, kvf_u32 count, kvf_u32 planes,
                                          kvf_u64 pieceBytes, kvf_u64 planeBytes, const kvf_u32* tables,
                                          kvf_u32* planeSums) {
  const kvf_u64 i = (kvf_u64)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (kvf_u64)count * planes) return;
  const kvf_u32 b = (kvf_u32)(i / planes);
  const kvf_u32 p = (kvf_u32)(i % planes);
  const kvf_u32* otherPlanes = tables + 8 * 256;
  const kvf_u8* piece = reinterpret_cast<const kvf_u8*>(blocks[b]) + p * planeBytes;
  kvf_u32 s = 0;
  for (kvf_u32 t = 0; t < fills[b]; ++t, piece += pieceBytes)
    s = kvf_crc32c(tables, kvf_shift(otherPlanes, s), piece, pieceBytes);
  planeSums[i] = s;
}
