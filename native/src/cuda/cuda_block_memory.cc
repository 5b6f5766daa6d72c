// CudaDeviceMemory and PinnedHostMemory (see cuda_block_memory.h).
#include "cuda_block_memory.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

namespace kvfabric::cuda {

FrameChunking FrameChunking::of(uint64_t blockBytes) {
  FrameChunking c;
  c.blockBytes = blockBytes;
  // blockBytes <= 2^31 <= kMaxChunkBytes, so a chunk holds at least one frame.
  c.framesPerChunk = static_cast<uint32_t>(std::min<uint64_t>(kMaxChunkBytes / blockBytes, 0xFFFFFFFFu));
  return c;
}

uint64_t FrameChunking::chunkBytes(uint32_t chunk, uint32_t frames) const {
  const uint64_t first = uint64_t{chunk} * framesPerChunk;
  return std::min<uint64_t>(framesPerChunk, frames - first) * blockBytes;
}

uint64_t FrameChunking::deviceChunkBytes(uint32_t chunk, uint32_t frames) const {
  const uint64_t bytes = chunkBytes(chunk, frames);
  return (bytes + kDeviceAllocationGranule - 1) / kDeviceAllocationGranule * kDeviceAllocationGranule;
}

uint64_t FrameChunking::deviceBytes(uint32_t frames) const {
  const uint32_t chunks = chunksFor(frames);
  if (chunks == 0) return 0;
  // Every chunk but the last is full; only the last may need rounding of its own.
  return uint64_t{chunks - 1} * deviceChunkBytes(0, frames) + deviceChunkBytes(chunks - 1, frames);
}

// ---- pinned host tier ----

Status PinnedHostMemory::create(const CudaDevice& device, const BlockLayout& layout, uint32_t blockCount,
                                std::unique_ptr<PinnedHostMemory>* out) {
  std::unique_ptr<PinnedHostMemory> m(new (std::nothrow) PinnedHostMemory(layout));
  if (!m) return Status(Code::kOutOfMemory, "host memory exhausted for the pinned tier");
  const uint32_t chunks = m->chunking_.chunksFor(blockCount);
  try {
    m->chunks_.resize(chunks);
  } catch (const std::bad_alloc&) {
    return Status(Code::kOutOfMemory, "host memory exhausted for the pinned tier");
  }
  for (uint32_t c = 0; c < chunks; ++c) {
    const uint64_t bytes = m->chunking_.chunkBytes(c, blockCount);
    Status st = m->chunks_[c].allocate(device, bytes);
    if (!st.isOk()) return st;  // earlier chunks are freed with m
    std::memset(m->chunks_[c].host(), 0, bytes);  // frames start clean, as the allocator assumes
  }
  *out = std::move(m);
  return Status::ok();
}

// ---- device tier ----

Status CudaDeviceMemory::create(const CudaDevice& device, const BlockLayout& layout, uint32_t blockCount,
                                std::unique_ptr<CudaDeviceMemory>* out) {
  std::unique_ptr<CudaDeviceMemory> m(new (std::nothrow) CudaDeviceMemory(device, layout, blockCount));
  if (!m) return Status(Code::kOutOfMemory, "host memory exhausted for the device pool");
  Status st = m->stream_.create(device);
  if (st.isOk()) st = m->transfer_.init();
  if (st.isOk()) st = m->staging_.allocate(device, layout.blockBytes);
  if (st.isOk()) st = m->prepareChecksums();
  if (!st.isOk()) return st;
  const uint32_t chunks = m->chunking_.chunksFor(blockCount);
  try {
    m->chunks_.resize(chunks);
  } catch (const std::bad_alloc&) {
    return Status(Code::kOutOfMemory, "host memory exhausted for the device pool");
  }
  const DriverApi& api = device.api();
  for (uint32_t c = 0; c < chunks; ++c) {
    const uint64_t bytes = m->chunking_.deviceChunkBytes(c, blockCount);
    st = m->chunks_[c].allocate(device, bytes);
    if (!st.isOk()) return st;
    // cuMemAlloc does not zero; the allocator assumes fresh frames are clean. The padding past the
    // last frame too: an IPC importer maps the whole chunk.
    const ContextScope s = device.scope();
    st = s.status();
    if (st.isOk()) {
      st = check(api.cuMemsetD8Async(m->chunks_[c].address(), 0, bytes, m->stream_.get()), "cuMemsetD8Async");
    }
    if (!st.isOk()) {
      (void)m->stream_.finish("zeroing the device pool");  // earlier memsets may still run on chunks freed with m
      return st;
    }
  }
  st = m->stream_.finish("zeroing the device pool");
  if (!st.isOk()) return st;
  *out = std::move(m);
  return Status::ok();
}

// Before the chunks: the kernel's self-test borrows device memory for a moment.
Status CudaDeviceMemory::prepareChecksums() {
  const char* choice = std::getenv("KVFABRIC_CUDA_CHECKSUMS");
  if (choice != nullptr && std::strcmp(choice, "host") == 0) {
    checksumWay_ = "host (KVFABRIC_CUDA_CHECKSUMS=host)";
    return Status::ok();
  }
  const Status st = DeviceChecksum::create(device_, layout_, frames_, &sums_);
  if (st.isOk()) {
    checksumWay_ = "device kernel";
    return st;
  }
  // No kernel (no NVRTC, a failed self-test) or no room for it: the CPU sums the pinned side instead.
  // A lost device is no such reason: the pool fails.
  if ((st.code() != Code::kUnavailable && st.code() != Code::kOutOfMemory) || !lostStatus(device_.index()).isOk())
    return st;
  checksumWay_ = "host (kernel not used: " + st.message() + ")";
  return Status::ok();
}

void CudaDeviceMemory::sumBlocks(const uint32_t* frames, const uint32_t* fills, size_t count, uint32_t* sums) const {
  if (!sums_) {
    note(Status(Code::kInvalidState, "sumBlocks without the checksum kernel"));
    return;
  }
  std::vector<CUdeviceptr> blocks;
  if (!sized(&blocks, count, "a checksum launch's block list")) return;
  for (size_t i = 0; i < count; ++i) blocks[i] = address(frames[i]);
  note(sums_->run(blocks.data(), fills, count, sums));
}

void CudaDeviceMemory::note(const Status& st) const {
  if (st.isOk()) return;
  std::lock_guard<std::mutex> lock(faultMu_);
  if (fault_.isOk()) fault_ = st;
}

template <typename T>
bool CudaDeviceMemory::sized(std::vector<T>* list, size_t count, const char* what) const {
  try {
    list->resize(count);
    return true;
  } catch (const std::bad_alloc&) {
    note(Status(Code::kOutOfMemory, std::string("host memory exhausted for ") + what));
    return false;
  }
}

Status CudaDeviceMemory::fault() const {
  std::lock_guard<std::mutex> lock(faultMu_);
  return fault_;
}

template <typename Body>
void CudaDeviceMemory::onStream(const char* what, Body body) const {
  const ContextScope s = device_.scope();
  Status st = s.status();
  if (!st.isOk()) {
    note(st);
    return;
  }
  st = body(device_.api(), stream_.get());
  // Waits even when queueing failed midway: earlier work may still be touching the caller's buffer.
  const Status done = stream_.finish(what);
  note(st.isOk() ? done : st);
}

template <typename Body, typename Landed>
void CudaDeviceMemory::staged(const char* what, uint64_t bytes, Body body, Landed landed) const {
  std::lock_guard<std::mutex> lock(stagingMu_);
  if (bytes > staging_.bytes()) {  // the BlockMemory contract keeps every call within one block
    note(Status(Code::kInvalidArgument, std::string(what) + " of " + std::to_string(bytes) + " bytes exceeds a block"));
    return;
  }
  const ContextScope s = device_.scope();
  Status st = s.status();
  if (st.isOk()) st = body(device_.api(), stream_.get(), staging_.host());
  // Waits even when queueing failed midway: earlier copies may still be using staging_.
  const Status done = s.status().isOk() ? stream_.finish(what) : s.status();
  if (st.isOk()) st = done;
  if (st.isOk()) landed(staging_.host());
  note(st);
}

void CudaDeviceMemory::writeSlots(uint32_t block, uint32_t slot, uint32_t count, const uint8_t* src) {
  // The token-major bytes go to pinned staging first (a CPU copy), then one strided DMA per plane lands
  // them as consecutive slots of each plane; one event ends it all.
  const uint64_t bytes = uint64_t{count} * layout_.bytesPerToken;
  staged(
      "append", bytes,
      [&](const DriverApi& api, CUstream s, uint8_t* staging) {
        std::memcpy(staging, src, bytes);  // staging is idle: the previous call waited for its copies
        const CUdeviceptr base = address(block) + slot * layout_.tokenPlaneBytes;
        for (uint32_t p = 0; p < layout_.planes; ++p) {
          CUDA_MEMCPY2D c{};
          c.srcMemoryType = kMemoryTypeHost;
          c.srcHost = staging + p * layout_.tokenPlaneBytes;
          c.srcPitch = layout_.bytesPerToken;
          c.dstMemoryType = kMemoryTypeDevice;
          c.dstDevice = base + p * layout_.planeBytes;
          c.dstPitch = layout_.tokenPlaneBytes;
          c.WidthInBytes = layout_.tokenPlaneBytes;
          c.Height = count;
          Status st = check(api.cuMemcpy2DAsync(&c, s), "cuMemcpy2DAsync_v2");
          if (!st.isOk()) return st;
        }
        return Status::ok();
      },
      [](uint8_t*) {});
}

void CudaDeviceMemory::readSlots(uint32_t block, uint32_t slot, uint32_t count, uint8_t* dst) const {
  const uint64_t bytes = uint64_t{count} * layout_.bytesPerToken;
  staged(
      "read", bytes,
      [&](const DriverApi& api, CUstream s, uint8_t* staging) {
        const CUdeviceptr base = address(block) + slot * layout_.tokenPlaneBytes;
        for (uint32_t p = 0; p < layout_.planes; ++p) {
          CUDA_MEMCPY2D c{};
          c.srcMemoryType = kMemoryTypeDevice;
          c.srcDevice = base + p * layout_.planeBytes;
          c.srcPitch = layout_.tokenPlaneBytes;
          c.dstMemoryType = kMemoryTypeHost;
          c.dstHost = staging + p * layout_.tokenPlaneBytes;
          c.dstPitch = layout_.bytesPerToken;
          c.WidthInBytes = layout_.tokenPlaneBytes;
          c.Height = count;
          Status st = check(api.cuMemcpy2DAsync(&c, s), "cuMemcpy2DAsync_v2");
          if (!st.isOk()) return st;
        }
        return Status::ok();
      },
      [&](const uint8_t* staging) { std::memcpy(dst, staging, bytes); });
}

void CudaDeviceMemory::readBlock(uint32_t block, uint8_t* dst) const {
  const uint64_t bytes = layout_.blockBytes;
  staged(
      "read", bytes,
      [&](const DriverApi& api, CUstream s, uint8_t* staging) {
        return check(api.cuMemcpyDtoHAsync(staging, address(block), bytes, s), "cuMemcpyDtoHAsync_v2");
      },
      [&](const uint8_t* staging) { std::memcpy(dst, staging, bytes); });
}

void CudaDeviceMemory::writeBlock(uint32_t block, const uint8_t* src) {
  const uint64_t bytes = layout_.blockBytes;
  staged(
      "write", bytes,
      [&](const DriverApi& api, CUstream s, uint8_t* staging) {
        std::memcpy(staging, src, bytes);
        return check(api.cuMemcpyHtoDAsync(address(block), staging, bytes, s), "cuMemcpyHtoDAsync_v2");
      },
      [](uint8_t*) {});
}

void CudaDeviceMemory::copyBlock(uint32_t dstBlock, uint32_t srcBlock) {
  onStream("copy-on-write", [&](const DriverApi& api, CUstream s) {
    return check(api.cuMemcpyDtoDAsync(address(dstBlock), address(srcBlock), layout_.blockBytes, s),
                 "cuMemcpyDtoDAsync_v2");
  });
}

void CudaDeviceMemory::scrubBlock(uint32_t block) {
  onStream("scrub", [&](const DriverApi& api, CUstream s) {
    return check(api.cuMemsetD8Async(address(block), 0, layout_.blockBytes, s), "cuMemsetD8Async");
  });
}

void CudaDeviceMemory::moveBlocks(Direction direction, BlockMemory& host, const FrameMove* moves, size_t count) {
  auto* pinned = dynamic_cast<PinnedHostMemory*>(&host);
  if (!pinned) {  // not built by the CUDA backend: the per-block defaults still work
    direction == Direction::kToHost ? BlockMemory::offloadBlocks(host, moves, count)
                                    : BlockMemory::restoreBlocks(host, moves, count);
    return;
  }
  std::vector<BlockCopy> copies;
  if (!sized(&copies, count, "a tier move's copy list")) return;
  const bool toHost = direction == Direction::kToHost;
  for (size_t i = 0; i < count; ++i) {
    const uint32_t deviceFrame = toHost ? moves[i].from : moves[i].to;
    const uint32_t hostFrame = toHost ? moves[i].to : moves[i].from;
    copies[i] = {address(deviceFrame), chunking_.chunk(deviceFrame), pinned->address(hostFrame),
                 pinned->mappedAddress(hostFrame), pinned->chunkOf(hostFrame)};
  }
  note(transfer_.run(direction, copies.data(), count, transferWayFromEnv()));
}

void CudaDeviceMemory::offloadBlocks(BlockMemory& host, const FrameMove* moves, size_t count) {
  moveBlocks(Direction::kToHost, host, moves, count);
}

void CudaDeviceMemory::restoreBlocks(BlockMemory& host, const FrameMove* moves, size_t count) {
  moveBlocks(Direction::kToDevice, host, moves, count);
}

Status CudaDeviceMemory::exportIpc(std::vector<IpcChunk>* out) const {
  if (!device_.api().cuIpcGetMemHandle) return Status(Code::kUnavailable, "the CUDA driver lacks cuIpcGetMemHandle");
  const ContextScope s = device_.scope();
  Status st = s.status();
  if (!st.isOk()) return st;
  out->clear();
  for (uint32_t c = 0; c < chunks_.size(); ++c) {
    IpcChunk chunk{};
    st = check(device_.api().cuIpcGetMemHandle(&chunk.handle, chunks_[c].address()), "cuIpcGetMemHandle");
    if (!st.isOk()) return st;
    chunk.bytes = chunks_[c].bytes();
    chunk.firstFrame = c * chunking_.framesPerChunk;
    chunk.frames = static_cast<uint32_t>(chunking_.chunkBytes(c, frames_) / layout_.blockBytes);
    out->push_back(chunk);
  }
  return Status::ok();
}

}  // namespace kvfabric::cuda
