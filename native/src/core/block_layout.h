// Model shape and the block-major layout derived from it. A block is one contiguous extent holding
// every layer's K and V for its tokens, as planes [layer][K,V] of tokensPerBlock slots each, so a block
// moves between tiers in one copy and an attention kernel still finds one layer's K contiguous.
#pragma once

#include <cstdint>

#include "status.h"

namespace kvfabric {

struct ModelShape {
  uint32_t layers = 0;
  uint32_t kvHeads = 0;
  uint32_t headDim = 0;
  uint32_t dtypeBytes = 0;
};

struct BlockLayout {
  uint32_t tokensPerBlock = 0;
  uint32_t planes = 0;           // layers x 2
  uint64_t tokenPlaneBytes = 0;  // kvHeads x headDim x dtypeBytes: one token in one plane
  uint64_t planeBytes = 0;       // tokensPerBlock x tokenPlaneBytes
  uint64_t bytesPerToken = 0;    // planes x tokenPlaneBytes
  uint64_t blockBytes = 0;       // tokensPerBlock x bytesPerToken

  static constexpr uint64_t kMaxBytesPerToken = uint64_t{1} << 30;
  static constexpr uint64_t kMaxBlockBytes = uint64_t{1} << 31;

  // Validates in 64-bit arithmetic so no product can overflow before it is checked.
  static Status make(const ModelShape& shape, uint32_t tokensPerBlock, BlockLayout* out) {
    if (shape.layers == 0 || shape.kvHeads == 0 || shape.headDim == 0 || shape.dtypeBytes == 0 || tokensPerBlock == 0) {
      return Status(Code::kInvalidArgument, "model shape fields and tokensPerBlock must be >= 1");
    }
    BlockLayout l;
    l.tokensPerBlock = tokensPerBlock;
    const uint64_t planes = uint64_t{shape.layers} * 2;
    const uint64_t tokenPlane = uint64_t{shape.kvHeads} * shape.headDim;
    if (tokenPlane > kMaxBytesPerToken || tokenPlane * shape.dtypeBytes > kMaxBytesPerToken ||
        planes > kMaxBytesPerToken || planes * tokenPlane * shape.dtypeBytes > kMaxBytesPerToken) {
      return Status(Code::kInvalidArgument, "bytes per token exceeds 2^30");
    }
    l.planes = static_cast<uint32_t>(planes);
    l.tokenPlaneBytes = tokenPlane * shape.dtypeBytes;
    l.bytesPerToken = planes * l.tokenPlaneBytes;
    if (l.bytesPerToken * tokensPerBlock > kMaxBlockBytes) {
      return Status(Code::kInvalidArgument, "block bytes exceed 2^31");
    }
    l.planeBytes = l.tokenPlaneBytes * tokensPerBlock;
    l.blockBytes = l.bytesPerToken * tokensPerBlock;
    *out = l;
    return Status::ok();
  }
};

}  // namespace kvfabric
