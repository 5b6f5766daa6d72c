// CudaDeviceMemory and PinnedHostMemory (see cuda_block_memory.h).
#include "cuda_block_memory.h"

#include <algorithm>
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
  if (!st.isOk()) return st;
  const uint32_t chunks = m->chunking_.chunksFor(blockCount);
  try {
    m->chunks_.resize(chunks);
  } catch (const std::bad_alloc&) {
    return Status(Code::kOutOfMemory, "host memory exhausted for the device pool");
  }
  const DriverApi& api = device.api();
  for (uint32_t c = 0; c < chunks; ++c) {
    const uint64_t bytes = m->chunking_.chunkBytes(c, blockCount);
    st = m->chunks_[c].allocate(device, bytes);
    if (!st.isOk()) return st;
    // cuMemAlloc does not zero; the allocator assumes fresh frames are clean.
    st = check(api.cuMemsetD8Async(m->chunks_[c].address(), 0, bytes, m->stream_.get()), "cuMemsetD8Async");
    if (!st.isOk()) return st;
  }
  st = m->stream_.finish("zeroing the device pool");
  if (!st.isOk()) return st;
  *out = std::move(m);
  return Status::ok();
}

void CudaDeviceMemory::note(const Status& st) const {
  if (st.isOk()) return;
  std::lock_guard<std::mutex> lock(faultMu_);
  if (fault_.isOk()) fault_ = st;
}

Status CudaDeviceMemory::fault() const {
  std::lock_guard<std::mutex> lock(faultMu_);
  return fault_;
}

template <typename Body>
void CudaDeviceMemory::onStream(const char* what, Body body) const {
  Status st = device_.makeCurrent();
  if (st.isOk()) st = body(device_.api(), stream_.get());
  // Waits even when queueing failed midway: earlier work may still be touching the caller's buffer.
  const Status done = stream_.finish(what);
  note(st.isOk() ? done : st);
}

void CudaDeviceMemory::writeSlots(uint32_t block, uint32_t slot, uint32_t count, const uint8_t* src) {
  // One strided copy per plane: the token-major source rows land as consecutive slots of the plane.
  onStream("append", [&](const DriverApi& api, CUstream s) {
    const CUdeviceptr base = address(block) + slot * layout_.tokenPlaneBytes;
    for (uint32_t p = 0; p < layout_.planes; ++p) {
      CUDA_MEMCPY2D c{};
      c.srcMemoryType = kMemoryTypeHost;
      c.srcHost = src + p * layout_.tokenPlaneBytes;
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
  });
}

void CudaDeviceMemory::readSlots(uint32_t block, uint32_t slot, uint32_t count, uint8_t* dst) const {
  onStream("read", [&](const DriverApi& api, CUstream s) {
    const CUdeviceptr base = address(block) + slot * layout_.tokenPlaneBytes;
    for (uint32_t p = 0; p < layout_.planes; ++p) {
      CUDA_MEMCPY2D c{};
      c.srcMemoryType = kMemoryTypeDevice;
      c.srcDevice = base + p * layout_.planeBytes;
      c.srcPitch = layout_.tokenPlaneBytes;
      c.dstMemoryType = kMemoryTypeHost;
      c.dstHost = dst + p * layout_.tokenPlaneBytes;
      c.dstPitch = layout_.bytesPerToken;
      c.WidthInBytes = layout_.tokenPlaneBytes;
      c.Height = count;
      Status st = check(api.cuMemcpy2DAsync(&c, s), "cuMemcpy2DAsync_v2");
      if (!st.isOk()) return st;
    }
    return Status::ok();
  });
}

void CudaDeviceMemory::readBlock(uint32_t block, uint8_t* dst) const {
  onStream("read", [&](const DriverApi& api, CUstream s) {
    return check(api.cuMemcpyDtoHAsync(dst, address(block), layout_.blockBytes, s), "cuMemcpyDtoHAsync_v2");
  });
}

void CudaDeviceMemory::writeBlock(uint32_t block, const uint8_t* src) {
  onStream("write", [&](const DriverApi& api, CUstream s) {
    return check(api.cuMemcpyHtoDAsync(address(block), src, layout_.blockBytes, s), "cuMemcpyHtoDAsync_v2");
  });
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
  try {
    copies.resize(count);
  } catch (const std::bad_alloc&) {
    note(Status(Code::kOutOfMemory, "host memory exhausted for a tier move's copy list"));
    return;
  }
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
  Status st = device_.makeCurrent();
  if (!st.isOk()) return st;
  out->clear();
  for (uint32_t c = 0; c < chunks_.size(); ++c) {
    IpcChunk chunk{};
    st = check(device_.api().cuIpcGetMemHandle(&chunk.handle, chunks_[c].address()), "cuIpcGetMemHandle");
    if (!st.isOk()) return st;
    chunk.bytes = chunks_[c].bytes();
    chunk.firstFrame = c * chunking_.framesPerChunk;
    chunk.frames = static_cast<uint32_t>(chunks_[c].bytes() / layout_.blockBytes);
    out->push_back(chunk);
  }
  return Status::ok();
}

}  // namespace kvfabric::cuda
