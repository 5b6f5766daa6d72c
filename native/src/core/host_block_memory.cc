// Host-memory backend: block bytes in one anonymous mapping; and the defaults every backend shares.
#include <sys/mman.h>

#include <cstdint>
#include <cstring>

#include "block_memory.h"

namespace kvfabric {
namespace {
constexpr size_t kHugePage = size_t{2} << 20;
}  // namespace

Status HostBlockMemory::create(const BlockLayout& layout, uint32_t blockCount, std::unique_ptr<BlockMemory>* out) {
  const uint64_t bytes = layout.blockBytes * blockCount;  // <= 2^31 x 2^32, no overflow
  if (bytes > static_cast<uint64_t>(SIZE_MAX)) {
    return Status(Code::kOutOfMemory, "pool of " + std::to_string(bytes) + " bytes cannot be mapped");
  }
  // Aligned to a huge page and advised to use them: where transparent huge pages are "madvise" (the
  // default on many distributions), a plain mapping gets 4 KiB pages, and every copy then pays TLB misses
  // and every first touch a fault per 4 KiB (bench/tiers.bench.ts). The slack around the aligned range is
  // returned at once.
  const size_t size = static_cast<size_t>(bytes);
  const size_t mapped = size + kHugePage;
  void* raw = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) {
    return Status(Code::kOutOfMemory, "the OS refused a pool of " + std::to_string(bytes) + " bytes");
  }
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHugePage - 1) & ~uintptr_t{kHugePage - 1};
  if (aligned > start) munmap(raw, aligned - start);
  const size_t tail = mapped - (aligned - start) - size;
  if (tail > 0) munmap(reinterpret_cast<void*>(aligned + size), tail);
#ifdef MADV_HUGEPAGE
  madvise(reinterpret_cast<void*>(aligned), size, MADV_HUGEPAGE);  // advice only: ignored where unsupported
#endif
  out->reset(new HostBlockMemory(layout, reinterpret_cast<uint8_t*>(aligned), bytes));
  return Status::ok();
}

HostBlockMemory::~HostBlockMemory() { munmap(base_, static_cast<size_t>(bytes_)); }

// Token-major bytes <-> slots [slot, slot + count) of a block, plane by plane.
void HostAddressedMemory::writeSlots(uint32_t block, uint32_t slot, uint32_t count, const uint8_t* src) {
  uint8_t* plane = frameAddress(block) + slot * layout_.tokenPlaneBytes;
  const uint64_t piece = layout_.tokenPlaneBytes;
  for (uint32_t p = 0; p < layout_.planes; ++p, plane += layout_.planeBytes) {
    for (uint32_t t = 0; t < count; ++t) {
      std::memcpy(plane + t * piece, src + t * layout_.bytesPerToken + p * piece, piece);
    }
  }
}

void HostAddressedMemory::readSlots(uint32_t block, uint32_t slot, uint32_t count, uint8_t* dst) const {
  const uint8_t* plane = frameAddress(block) + slot * layout_.tokenPlaneBytes;
  const uint64_t piece = layout_.tokenPlaneBytes;
  for (uint32_t p = 0; p < layout_.planes; ++p, plane += layout_.planeBytes) {
    for (uint32_t t = 0; t < count; ++t) {
      std::memcpy(dst + t * layout_.bytesPerToken + p * piece, plane + t * piece, piece);
    }
  }
}

void HostAddressedMemory::readBlock(uint32_t block, uint8_t* dst) const {
  std::memcpy(dst, frameAddress(block), layout_.blockBytes);
}

void HostAddressedMemory::writeBlock(uint32_t block, const uint8_t* src) {
  std::memcpy(frameAddress(block), src, layout_.blockBytes);
}

void HostAddressedMemory::copyBlock(uint32_t dstBlock, uint32_t srcBlock) {
  std::memcpy(frameAddress(dstBlock), frameAddress(srcBlock), layout_.blockBytes);
}

void HostAddressedMemory::scrubBlock(uint32_t block) { std::memset(frameAddress(block), 0, layout_.blockBytes); }

void BlockMemory::offloadBlocks(BlockMemory& host, const FrameMove* moves, size_t count) {
  for (size_t i = 0; i < count; ++i) readBlock(moves[i].from, host.hostAddress(moves[i].to));
}

void BlockMemory::restoreBlocks(BlockMemory& host, const FrameMove* moves, size_t count) {
  for (size_t i = 0; i < count; ++i) writeBlock(moves[i].to, host.hostAddress(moves[i].from));
}

}  // namespace kvfabric
