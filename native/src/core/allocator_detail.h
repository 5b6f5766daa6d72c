// Helpers shared by the translation units of PagedAllocator (paged_allocator.cc, tier_moves.cc,
// leases.cc): handle packing and the Status values several operations return.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "paged_allocator.h"

namespace kvfabric::detail {

inline uint32_t nextGeneration(uint32_t generation) {
  return generation >= PagedAllocator::kMaxGeneration ? 1 : generation + 1;
}

inline uint32_t handleIndex(Handle h) { return static_cast<uint32_t>(h & 0xFFFFFFFFu); }
inline uint32_t handleGeneration(Handle h) { return static_cast<uint32_t>(h >> 32); }

inline Status staleContext() { return Status(Code::kStaleHandle, "context handle is unknown or released"); }
inline Status busyContext() { return Status(Code::kBusy, "context has an append or tier move in flight"); }
inline Status busyBlocks() { return Status(Code::kBusy, "a block of the context is being read or moved"); }
inline Status outOfMemory() { return Status(Code::kOutOfMemory, "host memory exhausted for allocator metadata"); }
inline Status offloaded() {
  return Status(Code::kInvalidState, "context is offloaded; restore it to the device first");
}
inline Status tierFull(const char* tier, size_t needed, uint32_t free) {
  return Status(Code::kPoolExhausted, std::string(tier) + " tier needs " + std::to_string(needed) + " blocks, " +
                                          std::to_string(free) + " free");
}

// A page whose bytes are not the ones its checksum was taken over (TS adds the context's name).
inline Status checksumMismatch(uint32_t page, uint32_t block, uint32_t recorded, uint32_t read) {
  char detail[80];
  std::snprintf(detail, sizeof detail, " (block %u: recorded %08x, read %08x)", block, recorded, read);
  return Status(Code::kIntegrity, "page " + std::to_string(page) + " does not match its checksum" + detail);
}

}  // namespace kvfabric::detail
