// Host-memory backend: block bytes in one anonymous mapping; and the defaults every backend shares.
#include <sys/mman.h>

#include <cstring>

#include "block_memory.h"

namespace kvfabric {

Status HostBlockMemory::create(const BlockLayout& layout, uint32_t blockCount, std::unique_ptr<BlockMemory>* out) {
  const uint64_t bytes = layout.blockBytes * blockCount;  // <= 2^31 x 2^32, no overflow
  if (bytes > static_cast<uint64_t>(SIZE_MAX)) {
    return Status(Code::kOutOfMemory, "pool of " + std::to_string(bytes) + " bytes cannot be mapped");
  }
  void* base = mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) {
    return Status(Code::kOutOfMemory, "the OS refused a pool of " + std::to_string(bytes) + " bytes");
  }
  out->reset(new HostBlockMemory(layout, static_cast<uint8_t*>(base), bytes));
  return Status::ok();
}

HostBlockMemory::~HostBlockMemory() { munmap(base_, static_cast<size_t>(bytes_)); }

void scatterTokens(const BlockLayout& layout, uint8_t* blockBase, uint32_t slot, uint32_t count, const uint8_t* src) {
  uint8_t* plane = blockBase + slot * layout.tokenPlaneBytes;
  const uint64_t piece = layout.tokenPlaneBytes;
  for (uint32_t p = 0; p < layout.planes; ++p, plane += layout.planeBytes) {
    for (uint32_t t = 0; t < count; ++t) {
      std::memcpy(plane + t * piece, src + t * layout.bytesPerToken + p * piece, piece);
    }
  }
}

void gatherTokens(const BlockLayout& layout, const uint8_t* blockBase, uint32_t slot, uint32_t count, uint8_t* dst) {
  const uint8_t* plane = blockBase + slot * layout.tokenPlaneBytes;
  const uint64_t piece = layout.tokenPlaneBytes;
  for (uint32_t p = 0; p < layout.planes; ++p, plane += layout.planeBytes) {
    for (uint32_t t = 0; t < count; ++t) {
      std::memcpy(dst + t * layout.bytesPerToken + p * piece, plane + t * piece, piece);
    }
  }
}

void BlockMemory::offloadBlocks(BlockMemory& host, const FrameMove* moves, size_t count) {
  for (size_t i = 0; i < count; ++i) readBlock(moves[i].from, host.hostAddress(moves[i].to));
}

void BlockMemory::restoreBlocks(BlockMemory& host, const FrameMove* moves, size_t count) {
  for (size_t i = 0; i < count; ++i) writeBlock(moves[i].to, host.hostAddress(moves[i].from));
}

void HostBlockMemory::writeSlots(uint32_t block, uint32_t slot, uint32_t count, const uint8_t* src) {
  scatterTokens(layout_, blockBase(block), slot, count, src);
}

void HostBlockMemory::readSlots(uint32_t block, uint32_t slot, uint32_t count, uint8_t* dst) const {
  gatherTokens(layout_, blockBase(block), slot, count, dst);
}

void HostBlockMemory::readBlock(uint32_t block, uint8_t* dst) const {
  std::memcpy(dst, blockBase(block), layout_.blockBytes);
}

void HostBlockMemory::writeBlock(uint32_t block, const uint8_t* src) {
  std::memcpy(blockBase(block), src, layout_.blockBytes);
}

void HostBlockMemory::copyBlock(uint32_t dstBlock, uint32_t srcBlock) {
  std::memcpy(blockBase(dstBlock), blockBase(srcBlock), layout_.blockBytes);
}

void HostBlockMemory::scrubBlock(uint32_t block) { std::memset(blockBase(block), 0, layout_.blockBytes); }

}  // namespace kvfabric
