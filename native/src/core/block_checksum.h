// Per-block checksums: CRC-32C over a block's filled tokens in token-major order, the order an append
// delivers them. So an append extends a block's checksum from its new bytes alone (no read of device
// memory), and a tier move checks each block while it copies it, reading every byte once: it walks the
// block in token order, one token's piece of each plane at a time, and joins the pieces' CRCs with the
// CRC's shift operator. The cold tier stays AES-256-GCM; this checks memory, not attackers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "block_layout.h"

namespace kvfabric {

// CRC-32C (Castagnoli) of n bytes, continuing from `crc` (0 to start): crc32c(crc32c(0, A), B) is the
// CRC of A followed by B. SSE4.2 where the CPU has it, a table otherwise.
uint32_t crc32c(uint32_t crc, const uint8_t* data, size_t n);

// x -> the CRC register after `length` more zero bytes: a GF(2)-linear map, as four byte tables, for a
// length fixed in advance. What appends a CRC: crc(A + B) = shift by |B| of crc(A), xor crc(B).
struct CrcShift {
  uint32_t table[4][256];
  void make(uint64_t length);
  uint32_t operator()(uint32_t crc) const {
    return table[0][crc & 0xFF] ^ table[1][(crc >> 8) & 0xFF] ^ table[2][(crc >> 16) & 0xFF] ^ table[3][crc >> 24];
  }
};

class BlockChecksum {
 public:
  explicit BlockChecksum(const BlockLayout& layout);

  // The checksum of a block's first `fill` tokens, the block in block layout (planes of slots).
  uint32_t of(const uint8_t* block, uint32_t fill) const { return run(nullptr, block, fill, true); }
  // Copies a whole block (every slot: the destination frame is not scrubbed) and returns the checksum
  // of its first `fill` tokens, each source byte read once. Without `sum` it only copies, with the same
  // stores, so a benchmark can show what the checksum itself costs.
  uint32_t copy(uint8_t* dst, const uint8_t* src, uint32_t fill, bool sum = true) const {
    return run(dst, src, fill, sum);
  }

  // The device kernel's share (src/cuda/kernels/sum_planes.cu), for memory the CPU cannot read. It sums
  // each plane's pieces, shifting past the other planes' pieces of each token, with these tables:
  // [8][256] CRC-32C slicing tables, then the [4][256] shift past a token's other planes.
  static constexpr size_t kKernelTableWords = 12 * 256;
  void kernelTables(uint32_t* out) const;
  // A block's checksum from its plane sums, in plane order: the value of() gives for the same bytes.
  uint32_t joinPlanes(const uint32_t* planeSums) const;

 private:
  static constexpr uint32_t kRowsOnStack = 256;  // tokens a block may hold for the lane walk

  // Copies (with dst) and sums (with sum) the block.
  uint32_t run(uint8_t* dst, const uint8_t* src, uint32_t fill, bool sum) const;
  // Blocks of more tokens than the stack holds: one piece after the other in token order.
  uint32_t tokenWalk(uint8_t* dst, const uint8_t* src, uint32_t fill) const;
  // Copies a plane's bytes from `from` on.
  void copyRest(uint8_t* plane, const uint8_t* source, uint64_t from) const;
  static void finishCopy(uint8_t* dst);

  BlockLayout layout_;
  // Three lanes walk the planes side by side, each through contiguous memory (the prefetcher streams
  // each): planes [0, q), [q, 2q) and [2q, planes), q = lanePlanes_.
  uint32_t lanePlanes_;
  CrcShift piece_;       // one token's piece of one plane
  CrcShift secondLane_;  // the second lane's share of a token: q pieces
  CrcShift thirdLane_;   // the third lane's: planes - 2q pieces
  CrcShift token_;       // one whole token
  CrcShift otherPlanes_; // a token but one piece: the kernel's step from a plane's piece to its next
};

}  // namespace kvfabric
