// openPool: the backend decision and the CUDA backend's sizing (see cuda_backend.h).
#include "cuda_backend.h"

#include <algorithm>
#include <cmath>

#include "cuda_block_memory.h"

namespace kvfabric::cuda {
namespace {

// Device memory a fraction-sized pool leaves free: the pool's own streams, the transfer lanes' device
// tables (2 MiB granules each) and whatever the driver allocates per stream and launch.
constexpr uint64_t kFractionHeadroomBytes = uint64_t{64} << 20;

// Device-tier frames from a fraction of the device's free memory, measured after the kernel was built
// (its module and self-test take device memory too), granule rounding and headroom taken off.
Status framesFromFraction(const CudaDevice& device, const BlockLayout& layout, double fraction, uint32_t hostFrames,
                          uint32_t* frames) {
  uint64_t freeBytes = 0, totalBytes = 0;
  Status st = device.memoryInfo(&freeBytes, &totalBytes);
  if (!st.isOk()) return st;
  const uint64_t share = static_cast<uint64_t>(std::floor(static_cast<double>(freeBytes) * fraction));
  const uint64_t spare = freeBytes > kFractionHeadroomBytes ? freeBytes - kFractionHeadroomBytes : 0;
  const FrameChunking chunking = FrameChunking::of(layout.blockBytes);
  const uint64_t cap = PoolConfig::kMaxBlockCount - hostFrames;
  // The frames fit the share; with their granule rounding they must still fit what the headroom leaves.
  uint64_t n = std::min<uint64_t>(share / layout.blockBytes, cap);
  while (n > 0 && chunking.deviceBytes(static_cast<uint32_t>(n)) > spare) {
    const uint64_t over = chunking.deviceBytes(static_cast<uint32_t>(n)) - spare;
    n -= std::min<uint64_t>(n, std::max<uint64_t>(1, (over + layout.blockBytes - 1) / layout.blockBytes));
  }
  if (n == 0) {
    return Status(Code::kOutOfMemory, "deviceMemoryFraction " + std::to_string(fraction) + " of " +
                                          std::to_string(freeBytes) + " free bytes holds no block of " +
                                          std::to_string(layout.blockBytes) + " bytes");
  }
  *frames = static_cast<uint32_t>(n);
  return Status::ok();
}

Status openCuda(PoolConfig config, const BackendRequest& request, OpenedPool* out) {
  const CudaDevice* device = nullptr;
  Status st = CudaDevice::get(request.device, &device);
  if (!st.isOk()) return st;
  BlockLayout layout;
  st = PagedAllocator::validate(config, &layout);
  if (!st.isOk()) return st;
  // The kernel first: compiling, loading and self-testing it takes device memory a pool sized to the
  // free memory would otherwise have taken.
  std::string why;
  const TransferWay way = BlockTransfer(*device, layout.blockBytes).resolve(transferWayFromEnv(), &why);
  if (!lostStatus(request.device).isOk()) return lostStatus(request.device);
  if (request.deviceMemoryFraction > 0) {
    st = framesFromFraction(*device, layout, request.deviceMemoryFraction, config.hostBlockCount, &config.blockCount);
    if (!st.isOk()) return st;
  }
  uint64_t freeBytes = 0, totalBytes = 0;
  st = device->memoryInfo(&freeBytes, &totalBytes);
  if (!st.isOk()) return st;
  // < 2^31 x 2^32 plus granule rounding per chunk: no overflow
  const uint64_t poolBytes = FrameChunking::of(layout.blockBytes).deviceBytes(config.blockCount);
  if (poolBytes > freeBytes) {  // fail before allocating (and zeroing) chunks that cannot all fit
    return Status(Code::kOutOfMemory, "a device pool of " + std::to_string(poolBytes) + " bytes exceeds the " +
                                          std::to_string(freeBytes) + " bytes free on CUDA device " +
                                          std::to_string(request.device));
  }
  std::unique_ptr<CudaDeviceMemory> deviceMemory;
  st = CudaDeviceMemory::create(*device, layout, config.blockCount, &deviceMemory);
  if (!st.isOk()) return st;
  std::unique_ptr<PinnedHostMemory> hostMemory;
  if (config.hostBlockCount > 0) {
    st = PinnedHostMemory::create(*device, layout, config.hostBlockCount, &hostMemory);
    if (!st.isOk()) return st;
  }
  CudaDeviceMemory* raw = deviceMemory.get();
  out->info.checksums = raw->checksumWay();
  st = PagedAllocator::create(config, std::move(deviceMemory), std::move(hostMemory), &out->pool);
  if (!st.isOk()) return st;
  out->deviceMemory = raw;
  out->info.cuda = true;
  out->info.device = request.device;
  out->info.name = device->name();
  out->info.transfer = transferWayName(way);
  if (way == TransferWay::kKernel) out->info.transfer += " (" + device->kernelBuild() + ")";
  if (!why.empty()) out->info.transfer += " (kernel not used: " + why + ")";
  return Status::ok();
}

}  // namespace

Status probe(int device, std::string* name) {
  const CudaDevice* d = nullptr;
  Status st = CudaDevice::get(device, &d);
  if (st.isOk() && name) *name = d->name();
  return st;
}

Status openPool(const PoolConfig& config, const BackendRequest& request, OpenedPool* out) {
  if (request.deviceMemoryFraction < 0 || request.deviceMemoryFraction > 1 ||
      std::isnan(request.deviceMemoryFraction)) {
    return Status(Code::kInvalidArgument, "deviceMemoryFraction must be in (0, 1]");
  }
  if (request.kind != BackendKind::kCpu) {
    // Bad options fail as INVALID_ARGUMENT on every backend, before the driver is even loaded.
    BlockLayout layout;
    Status st = PagedAllocator::validate(config, &layout);
    if (!st.isOk()) return st;
    st = openCuda(config, request, out);
    // A lost device is no reason to carry on quietly on the CPU: the process must restart.
    const bool lost = !st.isOk() && !lostStatus(request.device).isOk();
    if (st.isOk() || request.kind == BackendKind::kCuda || st.code() != Code::kUnavailable || lost) {
      if (!st.isOk() && request.kind == BackendKind::kCuda && st.code() == Code::kUnavailable) {
        return Status(Code::kUnavailable, "CUDA backend requested but not usable: " + st.message());
      }
      return st;
    }
    out->info.reason = st.message();  // auto: fall back to the CPU, remembering why
  }
  out->info.cuda = false;
  out->info.transfer = "host memcpy";
  out->info.checksums = "host";
  return PagedAllocator::create(config, nullptr, nullptr, &out->pool);
}

}  // namespace kvfabric::cuda
