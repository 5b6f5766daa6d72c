// Moves many scattered whole blocks between device memory and pinned host memory in one call, on a
// dedicated stream per direction so an offload and a restore run at the same time (both PCIe
// directions). Two ways, chosen per call:
//  - kernel: one launch of the NVRTC-compiled gather/scatter kernel; the GPU reads or writes the mapped
//    pinned frames directly with 16-byte accesses, so block size barely matters;
//  - copies: one cuMemcpy per run of adjacent blocks (frames adjacent on both sides merge), queued on
//    the direction's stream and completed through one event. Needs nothing beyond the driver.
// `auto` takes the kernel when it compiled and the block size is a multiple of 16, else copies.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "cuda_device.h"

namespace kvfabric::cuda {

enum class TransferWay : uint8_t { kAuto, kKernel, kCopies };
enum class Direction : uint8_t { kToHost = 0, kToDevice = 1 };

// TransferWay from KVFABRIC_CUDA_TRANSFER (auto, kernel, copies); auto when unset or unknown.
TransferWay transferWayFromEnv();
const char* transferWayName(TransferWay way);

// One block's two homes. Chunks name the allocation each side lies in: copies merge only within one.
struct BlockCopy {
  CUdeviceptr device;
  uint32_t deviceChunk;
  uint8_t* host;
  CUdeviceptr hostMapped;
  uint32_t hostChunk;
};

class BlockTransfer {
 public:
  BlockTransfer(const CudaDevice& device, uint64_t blockBytes) : device_(device), blockBytes_(blockBytes) {}
  Status init();  // creates the two streams

  // Copies every block in `direction` and waits (on the calling thread) until the bytes have landed.
  // Calls in one direction run one at a time; the two directions overlap.
  Status run(Direction direction, const BlockCopy* copies, size_t count, TransferWay way = TransferWay::kAuto);
  // The way `auto` resolves to, and why the kernel is not used when it is not.
  TransferWay resolve(TransferWay way, std::string* why = nullptr) const;

 private:
  struct Lane {
    std::mutex mu;
    Stream stream;
    PinnedBuffer table;        // (source, destination) address pairs, written by the CPU...
    DeviceBuffer deviceTable;  // ...and copied here on the lane's stream: every GPU thread reads the table,
                               // so it must not cross PCIe per read
  };
  Status runCopies(Lane& lane, Direction direction, const BlockCopy* copies, size_t count);
  Status runKernel(Lane& lane, Direction direction, const BlockCopy* copies, size_t count);

  const CudaDevice& device_;
  const uint64_t blockBytes_;
  std::atomic<bool> kernelFailed_{false};
  Lane lanes_[2];
};

}  // namespace kvfabric::cuda
