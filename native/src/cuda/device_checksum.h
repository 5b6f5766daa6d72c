// Page checksums of device frames, summed on the GPU (kernels/sum_planes.cu), so a restore is checked
// where its bytes landed and the CPU reads none of them: one launch for a whole lease, its plane sums
// (4 bytes per plane per block) copied back and joined on the host into BlockChecksum::of's values.
// Built per pool, for the pool's layout, and self-tested before use; when the kernel is not usable (no
// NVRTC, a failed self-test) the pool sums a host copy instead. Verified on hardware only where a GPU
// was lent (docs/cuda.md).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>

#include "block_checksum.h"
#include "cuda_device.h"

namespace kvfabric::cuda {

class DeviceChecksum {
 public:
  // kUnavailable (with why) when the kernel is not usable or sums a known block wrong. Everything a call
  // needs is allocated here, for up to `maxBlocks` blocks a launch (a lease of more takes several), so
  // no call can run out of device memory later.
  static Status create(const CudaDevice& device, const BlockLayout& layout, uint32_t maxBlocks,
                       std::unique_ptr<DeviceChecksum>* out);

  // sums[i] = the checksum of the first fills[i] tokens of the block at device address blocks[i].
  // Waits on the calling thread; calls run one at a time.
  Status run(const CUdeviceptr* blocks, const uint32_t* fills, size_t count, uint32_t* sums);

 private:
  DeviceChecksum(const CudaDevice& device, const BlockLayout& layout, CUfunction kernel, uint32_t capacity)
      : device_(device), layout_(layout), checksum_(layout), kernel_(kernel), capacity_(capacity) {}
  Status init();
  // One launch over at most capacity_ blocks, under mu_.
  Status launch(const CUdeviceptr* blocks, const uint32_t* fills, size_t count, uint32_t* sums);
  // Two copies of known bytes (one at an odd address), summed here and by the CPU.
  Status selfTest();

  const CudaDevice& device_;
  const BlockLayout layout_;
  const BlockChecksum checksum_;
  const CUfunction kernel_;
  const uint32_t capacity_;  // blocks a launch takes
  DeviceBuffer tables_;      // BlockChecksum::kernelTables, uploaded once
  std::mutex mu_;
  Stream stream_;
  // Per launch: block addresses (8 bytes each), fills (4 each), then plane sums (4 per plane); the
  // pinned side is written and read by the CPU, the device side by the kernel.
  PinnedBuffer io_;
  DeviceBuffer deviceIo_;
};

}  // namespace kvfabric::cuda
