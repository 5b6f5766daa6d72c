// The CUDA backend's BlockMemory pair: the device tier in a few large cuMemAlloc chunks, and the host
// tier in pinned, device-mapped host memory. The allocator above is unchanged: it calls these only to
// move bytes. Every call returns once its bytes have landed, waiting on the calling thread through an
// event (the async API calls them from worker threads, so the JS thread never waits on the GPU for a
// demote, promote, async append or async read). A driver failure cannot be returned through the void
// BlockMemory calls, so the first one is kept and reported by fault(), which fails the lease's commit.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "block_memory.h"
#include "block_transfer.h"
#include "cuda_device.h"
#include "device_checksum.h"

namespace kvfabric::cuda {

// The largest single allocation: the pool is carved from chunks of whole frames up to this size.
constexpr uint64_t kMaxChunkBytes = uint64_t{2} << 30;
// Device chunks are whole multiples of this. cuMemAlloc may carve smaller allocations out of one shared
// 2 MiB block, and cuIpcGetMemHandle exports the whole block: a smaller chunk would let an importing
// process map bytes of another pool or tenant. It is also the granule the driver rounds up to anyway.
constexpr uint64_t kDeviceAllocationGranule = uint64_t{2} << 20;

// Which chunk holds a frame, and where in it.
struct FrameChunking {
  uint64_t blockBytes = 0;
  uint32_t framesPerChunk = 0;
  static FrameChunking of(uint64_t blockBytes);
  uint32_t chunk(uint32_t frame) const { return frame / framesPerChunk; }
  uint64_t offset(uint32_t frame) const { return uint64_t{frame % framesPerChunk} * blockBytes; }
  uint32_t chunksFor(uint32_t frames) const {
    return static_cast<uint32_t>((uint64_t{frames} + framesPerChunk - 1) / framesPerChunk);
  }
  uint64_t chunkBytes(uint32_t chunk, uint32_t frames) const;
  // chunkBytes rounded up to whole kDeviceAllocationGranule: what a device chunk allocates.
  uint64_t deviceChunkBytes(uint32_t chunk, uint32_t frames) const;
  // The device memory a pool of `frames` frames takes, granule rounding included.
  uint64_t deviceBytes(uint32_t frames) const;
};

// Byte operations are the CPU's (HostAddressedMemory); the GPU reaches the same frames through their
// mapped addresses.
class PinnedHostMemory final : public HostAddressedMemory {
 public:
  static Status create(const CudaDevice& device, const BlockLayout& layout, uint32_t blockCount,
                       std::unique_ptr<PinnedHostMemory>* out);

  uint8_t* address(uint32_t frame) const { return frameAddress(frame); }
  CUdeviceptr mappedAddress(uint32_t frame) const {
    return chunks_[chunking_.chunk(frame)].mapped() + chunking_.offset(frame);
  }
  uint32_t chunkOf(uint32_t frame) const { return chunking_.chunk(frame); }

 private:
  explicit PinnedHostMemory(const BlockLayout& layout)
      : HostAddressedMemory(layout), chunking_(FrameChunking::of(layout.blockBytes)) {}
  uint8_t* frameAddress(uint32_t frame) const override {
    return chunks_[chunking_.chunk(frame)].host() + chunking_.offset(frame);
  }
  FrameChunking chunking_;
  std::vector<PinnedBuffer> chunks_;
};

struct IpcChunk {
  CUipcMemHandle handle;
  uint64_t bytes;
  uint32_t firstFrame;
  uint32_t frames;
};

class CudaDeviceMemory final : public BlockMemory {
 public:
  static Status create(const CudaDevice& device, const BlockLayout& layout, uint32_t blockCount,
                       std::unique_ptr<CudaDeviceMemory>* out);

  void writeSlots(uint32_t block, uint32_t slot, uint32_t count, const uint8_t* src) override;
  void readSlots(uint32_t block, uint32_t slot, uint32_t count, uint8_t* dst) const override;
  void readBlock(uint32_t block, uint8_t* dst) const override;
  void writeBlock(uint32_t block, const uint8_t* src) override;
  void copyBlock(uint32_t dstBlock, uint32_t srcBlock) override;
  void scrubBlock(uint32_t block) override;
  uint8_t* hostAddress(uint32_t) override { return nullptr; }
  void offloadBlocks(BlockMemory& host, const FrameMove* moves, size_t count) override;
  void restoreBlocks(BlockMemory& host, const FrameMove* moves, size_t count) override;
  Status fault() const override;
  bool sumsInPlace() const override { return sums_ != nullptr; }
  void sumBlocks(const uint32_t* frames, const uint32_t* fills, size_t count, uint32_t* sums) const override;
  // Where page checksums of restores are computed: "device kernel", or "host (why not the kernel)".
  const std::string& checksumWay() const { return checksumWay_; }

  CUdeviceptr address(uint32_t frame) const {
    return chunks_[chunking_.chunk(frame)].address() + chunking_.offset(frame);
  }
  const CudaDevice& device() const { return device_; }
  BlockTransfer& transfer() { return transfer_; }
  // One CUDA IPC handle per chunk, for another process on the same GPU to map the pool.
  Status exportIpc(std::vector<IpcChunk>* out) const;

 private:
  CudaDeviceMemory(const CudaDevice& device, const BlockLayout& layout, uint32_t frames)
      : device_(device),
        layout_(layout),
        chunking_(FrameChunking::of(layout.blockBytes)),
        frames_(frames),
        transfer_(device, layout.blockBytes) {}
  // Runs body (which queues work on the stream), waits for it, and keeps the first failure.
  template <typename Body>
  void onStream(const char* what, Body body) const;
  void note(const Status& st) const;
  // Resizes a call's list; false (the failure kept for fault()) when the host has no room for it.
  template <typename T>
  bool sized(std::vector<T>* list, size_t count, const char* what) const;
  // The checksum kernel for this layout, unless KVFABRIC_CUDA_CHECKSUMS=host or it is not usable.
  Status prepareChecksums();
  // Runs body (which queues copies between staging_ and the device), waits, then landed(staging) on
  // success, all with staging_ held; keeps the first failure.
  template <typename Body, typename Landed>
  void staged(const char* what, uint64_t bytes, Body body, Landed landed) const;
  void moveBlocks(Direction direction, BlockMemory& host, const FrameMove* moves, size_t count);

  const CudaDevice& device_;
  BlockLayout layout_;
  FrameChunking chunking_;
  uint32_t frames_;
  std::vector<DeviceBuffer> chunks_;
  Stream stream_;  // appends, reads, copy-on-write and scrubs; tier moves use transfer_'s own streams
  // Pinned bytes of one block: appends, reads, spills and fills pass through it, so their copies are
  // asynchronous DMA (pageable memory makes every copy synchronous and staged by the driver) and one
  // event ends each call. One per pool, used under stagingMu_.
  mutable std::mutex stagingMu_;
  PinnedBuffer staging_;
  BlockTransfer transfer_;
  std::unique_ptr<DeviceChecksum> sums_;  // null: restores are summed on the pinned side by the CPU
  std::string checksumWay_;
  mutable std::mutex faultMu_;
  mutable Status fault_;
};

}  // namespace kvfabric::cuda
