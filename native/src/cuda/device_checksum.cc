// DeviceChecksum (see device_checksum.h).
#include "device_checksum.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <vector>

namespace kvfabric::cuda {
namespace {

constexpr unsigned kThreads = 128;      // one thread per (block, plane)
constexpr uint32_t kMaxLaunchBlocks = 4096;  // 8 GiB of Llama-3-8B blocks; a few MiB of addresses and sums

uint64_t ioBytes(size_t count, uint32_t planes) { return uint64_t{count} * (8 + 4 + 4 * uint64_t{planes}); }

}  // namespace

Status DeviceChecksum::create(const CudaDevice& device, const BlockLayout& layout, uint32_t maxBlocks,
                              std::unique_ptr<DeviceChecksum>* out) {
  CUfunction kernel = nullptr;
  Status st = device.sumKernel(&kernel);
  if (!st.isOk()) return st;
  const uint32_t capacity = std::max<uint32_t>(2, std::min(maxBlocks, kMaxLaunchBlocks));  // the self-test's 2
  std::unique_ptr<DeviceChecksum> sums(new (std::nothrow) DeviceChecksum(device, layout, kernel, capacity));
  if (!sums) return Status(Code::kOutOfMemory, "host memory exhausted for the checksum kernel's state");
  st = sums->init();
  if (st.isOk()) st = sums->selfTest();
  if (st.isOk()) *out = std::move(sums);
  return st;
}

Status DeviceChecksum::init() {
  Status st = stream_.create(device_);
  if (!st.isOk()) return st;
  const uint64_t bytes = BlockChecksum::kKernelTableWords * sizeof(uint32_t);
  PinnedBuffer staging;
  st = staging.allocate(device_, bytes);
  if (st.isOk()) st = tables_.allocate(device_, bytes);
  if (st.isOk()) st = io_.allocate(device_, ioBytes(capacity_, layout_.planes));
  if (st.isOk()) st = deviceIo_.allocate(device_, ioBytes(capacity_, layout_.planes));
  if (!st.isOk()) return st;
  checksum_.kernelTables(reinterpret_cast<uint32_t*>(staging.host()));
  const ContextScope s = device_.scope();
  if (!s.status().isOk()) return s.status();
  st = check(device_.api().cuMemcpyHtoDAsync(tables_.address(), staging.host(), bytes, stream_.get()),
             "cuMemcpyHtoDAsync_v2");
  const Status done = stream_.finish("uploading the checksum kernel's tables");  // staging is freed next
  return st.isOk() ? done : st;
}

Status DeviceChecksum::run(const CUdeviceptr* blocks, const uint32_t* fills, size_t count, uint32_t* sums) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t done = 0; done < count; done += capacity_) {
    const Status st = launch(blocks + done, fills + done, std::min<size_t>(capacity_, count - done), sums + done);
    if (!st.isOk()) return st;
  }
  return Status::ok();
}

Status DeviceChecksum::launch(const CUdeviceptr* blocks, const uint32_t* fills, size_t count, uint32_t* sums) {
  const uint32_t planes = layout_.planes;
  const uint64_t threads = uint64_t{count} * planes;
  const uint64_t grid = (threads + kThreads - 1) / kThreads;
  if (grid > 0x7FFFFFFFu) return Status(Code::kInvalidArgument, "too many planes for one checksum launch");
  const uint64_t fillsAt = uint64_t{count} * 8;
  const uint64_t sumsAt = fillsAt + uint64_t{count} * 4;
  std::memcpy(io_.host(), blocks, count * sizeof(CUdeviceptr));
  std::memcpy(io_.host() + fillsAt, fills, count * sizeof(uint32_t));
  const ContextScope s = device_.scope();
  if (!s.status().isOk()) return s.status();
  const DriverApi& api = device_.api();
  CUdeviceptr blockTable = deviceIo_.address();
  CUdeviceptr fillTable = deviceIo_.address() + fillsAt;
  unsigned blockCount = static_cast<unsigned>(count);
  unsigned planeCount = planes;
  unsigned long long pieceBytes = layout_.tokenPlaneBytes;
  unsigned long long planeBytes = layout_.planeBytes;
  CUdeviceptr tables = tables_.address();
  CUdeviceptr planeSums = deviceIo_.address() + sumsAt;
  void* params[] = {&blockTable, &fillTable, &blockCount, &planeCount, &pieceBytes, &planeBytes, &tables, &planeSums};
  Status st =
      check(api.cuMemcpyHtoDAsync(deviceIo_.address(), io_.host(), sumsAt, stream_.get()), "cuMemcpyHtoDAsync_v2");
  if (st.isOk()) {
    st = check(api.cuLaunchKernel(kernel_, static_cast<unsigned>(grid), 1, 1, kThreads, 1, 1, 0, stream_.get(), params,
                                  nullptr),
               "cuLaunchKernel");
  }
  if (st.isOk()) {
    st = check(api.cuMemcpyDtoHAsync(io_.host() + sumsAt, planeSums, threads * 4, stream_.get()),
               "cuMemcpyDtoHAsync_v2");
  }
  // Waits even when queueing failed midway: earlier work may still be using io_.
  const Status done = stream_.finish("summing pages on the device");
  if (!st.isOk()) return st;
  if (!done.isOk()) return done;
  const auto* planeSumsOut = reinterpret_cast<const uint32_t*>(io_.host() + sumsAt);
  for (size_t i = 0; i < count; ++i) sums[i] = checksum_.joinPlanes(planeSumsOut + i * planes);
  return Status::ok();
}

// A kernel that compiled but sums wrong would fail every restore as corrupt: it is never used.
Status DeviceChecksum::selfTest() {
  const uint64_t blockBytes = layout_.blockBytes;
  PinnedBuffer pattern;
  DeviceBuffer scratch;
  Status st = pattern.allocate(device_, blockBytes + 16);
  if (st.isOk()) st = scratch.allocate(device_, blockBytes + 16);
  if (!st.isOk()) return st;
  uint8_t* bytes = pattern.host();
  for (uint64_t i = 0; i < blockBytes + 16; ++i) bytes[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
  {
    const ContextScope s = device_.scope();
    if (!s.status().isOk()) return s.status();
    st = check(device_.api().cuMemcpyHtoDAsync(scratch.address(), bytes, blockBytes + 16, stream_.get()),
               "cuMemcpyHtoDAsync_v2");
    const Status done = stream_.finish("the checksum kernel's self-test");
    if (!st.isOk()) return st;
    if (!done.isOk()) return done;
  }
  // Aligned and odd addresses, a full and a partial block: the kernel's word and byte paths.
  const uint32_t full = layout_.tokensPerBlock;
  const uint32_t fills[] = {full, full > 1 ? full - 1 : full};
  const CUdeviceptr blocks[] = {scratch.address(), scratch.address() + 1};
  uint32_t sums[2] = {0, 0};
  st = run(blocks, fills, 2, sums);
  if (!st.isOk()) return st;
  const uint32_t expected[] = {checksum_.of(bytes, fills[0]), checksum_.of(bytes + 1, fills[1])};
  for (int i = 0; i < 2; ++i) {
    if (sums[i] != expected[i]) {
      return Status(Code::kUnavailable, "the checksum kernel failed its self-test (block " + std::to_string(i) + ": " +
                                            std::to_string(sums[i]) + ", the CPU's " + std::to_string(expected[i]) +
                                            ")");
    }
  }
  return Status::ok();
}

}  // namespace kvfabric::cuda
