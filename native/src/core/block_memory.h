// Where block bytes live. The allocator does all bookkeeping and calls this interface only to move
// bytes, so a backend (host memory, or CUDA device memory in native/src/cuda) is a plug-in, not a
// special case.
// Block indices here are frames: physical slots of one tier's arena. Implementations need no locking
// of their own: the allocator never lets two calls touch the same bytes at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "block_layout.h"
#include "status.h"

namespace kvfabric {

// One block of a tier move: from a frame of one tier to a frame of the other.
struct FrameMove {
  uint32_t from;
  uint32_t to;
};

class BlockMemory {
 public:
  virtual ~BlockMemory() = default;

  // Scatters `count` tokens of token-major host bytes into slots [slot, slot + count) of a block.
  virtual void writeSlots(uint32_t block, uint32_t slot, uint32_t count, const uint8_t* src) = 0;
  // Gathers slots [slot, slot + count) of a block into token-major host bytes.
  virtual void readSlots(uint32_t block, uint32_t slot, uint32_t count, uint8_t* dst) const = 0;
  // Copies a whole block's bytes to or from host memory, in block layout (tier moves, spills, fills).
  virtual void readBlock(uint32_t block, uint8_t* dst) const = 0;
  virtual void writeBlock(uint32_t block, const uint8_t* src) = 0;
  virtual void copyBlock(uint32_t dstBlock, uint32_t srcBlock) = 0;
  virtual void scrubBlock(uint32_t block) = 0;
  // The block's address when the memory is host-addressable (the host tier), else nullptr.
  virtual uint8_t* hostAddress(uint32_t block) = 0;

  // A whole lease's tier move in one call, so a backend can batch it (one kernel, one stream, one wait).
  // Called on the device tier with the host tier's memory; `from` frames are this memory's on offload
  // and host's on restore. The defaults copy block by block through host.hostAddress().
  virtual void offloadBlocks(BlockMemory& host, const FrameMove* moves, size_t count);
  virtual void restoreBlocks(BlockMemory& host, const FrameMove* moves, size_t count);
  // The first failure of a call that could not return it (a driver error); ok for host memory.
  virtual Status fault() const { return Status::ok(); }
  // Memory the CPU cannot read may sum frames where they lie (the CUDA device tier, on the GPU):
  // sums[i] = BlockChecksum::of frame frames[i]'s first fills[i] tokens. When sumsInPlace() is false the
  // caller sums a host copy instead. A failure is kept for fault().
  virtual bool sumsInPlace() const { return false; }
  virtual void sumBlocks(const uint32_t* /*frames*/, const uint32_t* /*fills*/, size_t /*count*/,
                         uint32_t* /*sums*/) const {}
};

// Memory the CPU addresses directly (the CPU backend's tiers, CUDA's pinned host tier): every operation
// is a memcpy or memset at the frame's address. Subclasses say where a frame is.
class HostAddressedMemory : public BlockMemory {
 public:
  void writeSlots(uint32_t block, uint32_t slot, uint32_t count, const uint8_t* src) override;
  void readSlots(uint32_t block, uint32_t slot, uint32_t count, uint8_t* dst) const override;
  void readBlock(uint32_t block, uint8_t* dst) const override;
  void writeBlock(uint32_t block, const uint8_t* src) override;
  void copyBlock(uint32_t dstBlock, uint32_t srcBlock) override;
  void scrubBlock(uint32_t block) override;
  uint8_t* hostAddress(uint32_t block) override { return frameAddress(block); }

 protected:
  explicit HostAddressedMemory(const BlockLayout& layout) : layout_(layout) {}
  virtual uint8_t* frameAddress(uint32_t frame) const = 0;

  BlockLayout layout_;
};

// Host memory from one anonymous mapping: zero-filled, page-aligned, committed lazily by the OS.
class HostBlockMemory final : public HostAddressedMemory {
 public:
  // Returns kOutOfMemory when the OS refuses the mapping.
  static Status create(const BlockLayout& layout, uint32_t blockCount, std::unique_ptr<BlockMemory>* out);
  ~HostBlockMemory() override;
  HostBlockMemory(const HostBlockMemory&) = delete;
  HostBlockMemory& operator=(const HostBlockMemory&) = delete;

 private:
  HostBlockMemory(const BlockLayout& layout, uint8_t* base, uint64_t bytes)
      : HostAddressedMemory(layout), base_(base), bytes_(bytes) {}
  uint8_t* frameAddress(uint32_t frame) const override { return base_ + uint64_t{frame} * layout_.blockBytes; }

  uint8_t* base_;
  uint64_t bytes_;
};

}  // namespace kvfabric
