// ReadLease::copyPlaneMajor: a read lease's blocks, each checked against its checksum and scattered
// into its planes' places in one pass over the source (the block is summed first, from memory, and
// then copied from the cache that sum filled, by stores that bypass the cache: the engine reads the
// laid-out state next, not this core).
#include "plane_major.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <new>
#include <string>

#include "paged_allocator.h"
#include "parallel_slices.h"
#include "stream_copy.h"

namespace kvfabric {

Status PlaneMajorLayout::extent(const BlockLayout& layout, uint64_t* end) const {
  if (offset.size() != layout.planes || elementBytes.size() != layout.planes) {
    return Status(Code::kInvalidArgument, "a plane-major layout names every plane of the block layout once");
  }
  const uint64_t planeBytes = tokens * layout.tokenPlaneBytes;
  if (tokens != 0 && planeBytes / tokens != layout.tokenPlaneBytes) {
    return Status(Code::kInvalidArgument, "plane-major extent overflows");
  }
  uint64_t furthest = 0;
  for (uint32_t p = 0; p < layout.planes; ++p) {
    const uint32_t element = elementBytes[p];
    if (element != 0 && (element > layout.tokenPlaneBytes || layout.tokenPlaneBytes % element != 0)) {
      return Status(Code::kInvalidArgument, "an element size of " + std::to_string(element) +
                                                " bytes does not divide a plane row of " +
                                                std::to_string(layout.tokenPlaneBytes));
    }
    if (offset[p] > UINT64_MAX - planeBytes) return Status(Code::kInvalidArgument, "plane-major extent overflows");
    furthest = std::max(furthest, offset[p] + planeBytes);
  }
  *end = furthest;
  return Status::ok();
}

Status ReadLease::copyPlaneMajor(const PlaneMajorLayout& target, uint8_t* dst) {
  if (!pool_) return Status::ok();
  const BlockLayout& layout = pool_->layout_;
  uint64_t end = 0;
  Status st = target.extent(layout, &end);
  if (!st.isOk()) return st;
  if (wholeBlock_ || target.tokens * layout.bytesPerToken != bytes_) {
    return Status(Code::kInvalidArgument, "a plane-major copy takes a token range lease of exactly its tokens");
  }
  const BlockChecksum& checksum = pool_->checksum_;
  const uint64_t rowBytes = layout.tokenPlaneBytes;
  // The token index (within the lease) each run starts at.
  std::vector<uint64_t> firstToken;
  try {
    firstToken.resize(runs_.size());
  } catch (const std::bad_alloc&) {
    return Status(Code::kOutOfMemory, "out of host memory");
  }
  for (size_t i = 0, t = 0; i < runs_.size(); t += runs_[i].count, ++i) firstToken[i] = t;

  std::atomic<size_t> firstBad{runs_.size()};
  std::atomic<bool> noMemory{false};
  inSlices(runs_.size(), bytes_, [&](size_t begin, size_t finish) {
    std::vector<uint8_t> bounce;  // a block the CPU cannot address (a CUDA device frame), read out first
    for (size_t i = begin; i < finish; ++i) {
      const SlotRun& run = runs_[i];
      BlockMemory& memory = pool_->arena(run.tier).memory();
      const uint8_t* block = memory.hostAddress(run.frame);
      if (block == nullptr) {
        try {
          bounce.resize(layout.blockBytes);
        } catch (const std::bad_alloc&) {
          noMemory = true;
          return;
        }
        memory.readBlock(run.frame, bounce.data());
        block = bounce.data();
      }
      if (checksum.of(block, fills_[i]) != checksums_[i]) {
        size_t seen = firstBad.load();
        while (i < seen && !firstBad.compare_exchange_weak(seen, i)) {
        }
        continue;
      }
      const uint64_t token = firstToken[i];
      for (uint32_t p = 0; p < layout.planes; ++p) {
        const uint8_t* rows = block + p * layout.planeBytes + uint64_t{run.slot} * rowBytes;
        const uint32_t element = target.elementBytes[p];
        if (element == 0) {
          streamCopy(dst + target.offset[p] + token * rowBytes, rows, run.count * rowBytes);
          continue;
        }
        for (uint64_t e = 0; e < rowBytes / element; ++e) {
          uint8_t* column = dst + target.offset[p] + (e * target.tokens + token) * element;
          for (uint32_t k = 0; k < run.count; ++k)
            std::memcpy(column + k * element, rows + k * rowBytes + e * element, element);
        }
      }
    }
    streamFence();  // the engine's thread reads the file next
  });
  if (noMemory) return Status(Code::kOutOfMemory, "out of host memory for a device block's bounce buffer");
  const size_t bad = firstBad.load();
  if (bad < runs_.size()) {
    const uint64_t page = (startToken_ + firstToken[bad]) / layout.tokensPerBlock;
    return Status(Code::kIntegrity, "page " + std::to_string(page) + " does not match its checksum");
  }
  return pool_->memoryFault();
}

}  // namespace kvfabric
