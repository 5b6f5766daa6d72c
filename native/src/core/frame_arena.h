// FrameArena: the physical side of one tier (device or host). Frames are block-sized extents of the
// tier's BlockMemory; the arena hands them out LIFO and remembers each free frame's last tenant (0: it
// is clean) so the allocator can zero it before its next owner sees it (ScrubPolicy). Not thread-safe: PagedAllocator
// holds its lock around every call.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "block_memory.h"

namespace kvfabric {

class FrameArena {
 public:
  FrameArena() = default;
  FrameArena(std::unique_ptr<BlockMemory> memory, uint32_t frames) : memory_(std::move(memory)), frames_(frames) {
    free_.reserve(frames);
    for (uint32_t f = frames; f-- > 0;) free_.push_back(f);  // frame 0 is handed out first
    lastTenant_.assign(frames, 0);
  }

  uint32_t frames() const { return frames_; }
  uint32_t freeFrames() const { return static_cast<uint32_t>(free_.size()); }
  BlockMemory& memory() const { return *memory_; }

  // Pops a frame for tenant and reports its previous owner (0: clean). It needs scrubbing when it is not
  // clean (under ScrubPolicy::kOnTenantChange: when that owner is another tenant), unless the caller
  // overwrites the whole frame.
  uint32_t take(uint32_t tenant, uint32_t* previousTenant) {
    const uint32_t f = free_.back();
    free_.pop_back();
    *previousTenant = lastTenant_[f];
    lastTenant_[f] = tenant;
    return f;
  }
  // Returns a frame holding tenant's bytes (or zeroes, when clean).
  void give(uint32_t frame, bool clean) {
    if (clean) lastTenant_[frame] = 0;
    free_.push_back(frame);
  }
  // Takes a frame out of circulation for the arena's lifetime: its bytes are unknown (a failed scrub).
  void withhold(uint32_t frame) {
    (void)frame;
    ++withheld_;
  }
  uint32_t withheldFrames() const { return withheld_; }
  // Undoes take() for a frame nothing was written to: it keeps its previous owner.
  void giveBackUntouched(uint32_t frame, uint32_t previousTenant) {
    lastTenant_[frame] = previousTenant;
    free_.push_back(frame);
  }

 private:
  std::unique_ptr<BlockMemory> memory_;
  uint32_t frames_ = 0;
  std::vector<uint32_t> free_;
  std::vector<uint32_t> lastTenant_;
  uint32_t withheld_ = 0;
};

}  // namespace kvfabric
