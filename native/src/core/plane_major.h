// A context's tokens laid out plane-major: every token's row of one plane ([layer][K|V]) side by side,
// the way llama.cpp's sequence-state file holds a cache, instead of the allocator's token-major reads.
// The file's other bytes (headers between the planes) are the caller's; this says only where each
// block plane's rows go, so a lease can copy them there straight from its frames (ReadLease::copyPlaneMajor).
#pragma once

#include <cstdint>
#include <vector>

#include "block_layout.h"
#include "status.h"

namespace kvfabric {

struct PlaneMajorLayout {
  // Per block plane (layers x 2, plane = layer x 2 + {K=0, V=1}): where the row of the first leased token
  // goes; row t follows at + t x tokenPlaneBytes.
  std::vector<uint64_t> offset;
  // Per block plane: 0 for rows; otherwise the plane is stored element-transposed in elements of this
  // many bytes (llama.cpp's V without flash attention): element e of token t at offset + (e x tokens + t) x it.
  std::vector<uint32_t> elementBytes;
  // Tokens the lease covers.
  uint64_t tokens = 0;

  // Where the planes' bytes end (the furthest byte any plane reaches), or an error when a plane is
  // missing, an element size does not divide a row, or an extent overflows.
  Status extent(const BlockLayout& layout, uint64_t* end) const;
};

}  // namespace kvfabric
