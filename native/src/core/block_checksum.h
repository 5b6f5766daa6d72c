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

// The CRC of A followed by B from the CRCs of A and B and B's length.
uint32_t crc32cCombine(uint32_t crcA, uint32_t crcB, uint64_t lengthB);

class BlockChecksum {
 public:
  explicit BlockChecksum(const BlockLayout& layout);

  // The checksum of a block's first `fill` tokens, the block in block layout (planes of slots).
  uint32_t of(const uint8_t* block, uint32_t fill) const { return run(nullptr, block, fill, true); }
  // Copies a whole block (every slot: the destination frame is not scrubbed) and returns the checksum
  // of its first `fill` tokens, each source byte read once. Without `sum` it only copies, with the same
  // stores, so a benchmark can show what the checksum itself costs.
  uint32_t copy(uint8_t* dst, const uint8_t* src, uint32_t fill, bool sum = true) const { return run(dst, src, fill, sum); }

 private:
  static constexpr uint32_t kRowsOnStack = 256;  // tokens a block may hold for the plane-by-plane walk

  // Copies (with dst) and sums (with sum) the block.
  uint32_t run(uint8_t* dst, const uint8_t* src, uint32_t fill, bool sum) const;
  uint32_t tokenWalk(uint8_t* dst, const uint8_t* src, uint32_t fill) const;
  // Copies a plane's bytes from `from` on.
  void copyRest(uint8_t* plane, const uint8_t* source, uint64_t from) const;
  static void finishCopy(uint8_t* dst);
  // The register after one more piece (tokenPlaneBytes) of zero bytes: what joins a piece's CRC on.
  uint32_t shiftPiece(uint32_t crc) const {
    return pieceShift_[0][crc & 0xFF] ^ pieceShift_[1][(crc >> 8) & 0xFF] ^ pieceShift_[2][(crc >> 16) & 0xFF] ^
           pieceShift_[3][crc >> 24];
  }

  BlockLayout layout_;
  uint32_t pieceShift_[4][256];
};

}  // namespace kvfabric
