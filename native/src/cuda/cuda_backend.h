// Backend choice for a pool: `cpu` (host memory), `cuda` (device memory + pinned host tier, or a clear
// kUnavailable naming why CUDA is not usable) or `auto` (CUDA when a device is usable, else CPU, with
// the reason kept). The only place that knows both backends; the allocator sees BlockMemory.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "block_memory.h"
#include "paged_allocator.h"

namespace kvfabric::cuda {

class CudaDeviceMemory;

enum class BackendKind : uint8_t { kAuto, kCpu, kCuda };

struct BackendRequest {
  BackendKind kind = BackendKind::kAuto;
  int device = 0;
  double deviceMemoryFraction = 0;  // > 0: size the device tier from free device memory instead of blockCount
};

struct BackendInfo {
  bool cuda = false;
  int device = -1;
  std::string name;      // the GPU's name
  std::string reason;    // why `auto` fell back to the CPU
  std::string transfer;  // the tier-move way (kernel / copies) and, for copies, why not the kernel
  std::string checksums;  // where restores are summed: "device kernel", "host (why)" or "host" (CPU)
};

struct OpenedPool {
  std::unique_ptr<PagedAllocator> pool;
  CudaDeviceMemory* deviceMemory = nullptr;  // owned by pool; null on the CPU backend
  BackendInfo info;
};

// Validates config, picks the backend, sizes and allocates its memory and creates the pool.
Status openPool(const PoolConfig& config, const BackendRequest& request, OpenedPool* out);

// Whether device index is usable, and if not why (the probe the tests and the benchmark skip on).
Status probe(int device, std::string* name);

}  // namespace kvfabric::cuda
