// BlockTransfer: the two ways of moving scattered blocks across PCIe (see block_transfer.h).
#include "block_transfer.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace kvfabric::cuda {
namespace {

constexpr unsigned kThreads = 256;
constexpr uint64_t kVecsPerThread = 4;  // per pass: enough loads in flight per thread over PCIe
constexpr unsigned kMaxCtasPerBlock = 64;
constexpr unsigned kMaxGridY = 65535;

}  // namespace

TransferWay transferWayFromEnv() {
  const char* v = std::getenv("KVFABRIC_CUDA_TRANSFER");
  if (!v) return TransferWay::kAuto;
  if (std::strcmp(v, "kernel") == 0) return TransferWay::kKernel;
  if (std::strcmp(v, "copies") == 0) return TransferWay::kCopies;
  return TransferWay::kAuto;
}

const char* transferWayName(TransferWay way) {
  switch (way) {
    case TransferWay::kAuto: return "auto";
    case TransferWay::kKernel: return "kernel";
    case TransferWay::kCopies: return "copies";
  }
  return "auto";
}

Status BlockTransfer::init() {
  for (Lane& lane : lanes_) {
    Status st = lane.stream.create(device_);
    if (!st.isOk()) return st;
  }
  return Status::ok();
}

TransferWay BlockTransfer::resolve(TransferWay way, std::string* why) const {
  if (way == TransferWay::kCopies) return way;
  if (blockBytes_ % 16 != 0) {
    if (why) *why = "block size " + std::to_string(blockBytes_) + " is not a multiple of 16";
    return TransferWay::kCopies;
  }
  CUfunction fn = nullptr;
  const Status st = device_.moveKernel(&fn);
  if (!st.isOk()) {
    if (why) *why = st.message();
    return TransferWay::kCopies;
  }
  return TransferWay::kKernel;
}

Status BlockTransfer::run(Direction direction, const BlockCopy* copies, size_t count, TransferWay way) {
  if (count == 0) return Status::ok();
  Lane& lane = lanes_[static_cast<int>(direction)];
  std::lock_guard<std::mutex> lock(lane.mu);
  const ContextScope scope = device_.scope();
  Status st = scope.status();
  if (!st.isOk()) return st;
  std::string why;
  const TransferWay resolved = resolve(way, &why);
  if (way == TransferWay::kKernel && resolved != TransferWay::kKernel) {
    return Status(Code::kUnavailable, "the block-move kernel is not usable: " + why);
  }
  if (resolved == TransferWay::kKernel && kernelFailed_.load()) {
    if (way == TransferWay::kKernel)
      return Status(Code::kUnavailable, "the block-move kernel failed to launch earlier");
    st = runCopies(lane, direction, copies, count);
  } else if (resolved == TransferWay::kKernel) {
    st = runKernel(lane, direction, copies, count);
    if (!st.isOk() && way == TransferWay::kAuto && lostStatus(device_.index()).isOk()) {
      // A launch refused at enqueue time (nothing ran): auto falls back to copies for good. Not after a
      // sticky error: that is the context failing, not the kernel, and copies would fail the same way.
      kernelFailed_.store(true);
      st = runCopies(lane, direction, copies, count);
    }
  } else {
    st = runCopies(lane, direction, copies, count);
  }
  // Waits even after a failed enqueue: work already queued may still touch these frames.
  const Status done = lane.stream.finish(direction == Direction::kToHost ? "offload" : "restore");
  return st.isOk() ? done : st;
}

Status BlockTransfer::runCopies(Lane& lane, Direction direction, const BlockCopy* copies, size_t count) {
  const DriverApi& api = device_.api();
  for (size_t i = 0; i < count;) {
    // Merge the following blocks while they continue both sides in the same allocations.
    size_t j = i + 1;
    while (j < count && copies[j].deviceChunk == copies[i].deviceChunk && copies[j].hostChunk == copies[i].hostChunk &&
           copies[j].device == copies[j - 1].device + blockBytes_ &&
           copies[j].host == copies[j - 1].host + blockBytes_) {
      ++j;
    }
    const size_t bytes = static_cast<size_t>(blockBytes_ * (j - i));
    const CUresult r = direction == Direction::kToHost
                           ? api.cuMemcpyDtoHAsync(copies[i].host, copies[i].device, bytes, lane.stream.get())
                           : api.cuMemcpyHtoDAsync(copies[i].device, copies[i].host, bytes, lane.stream.get());
    Status st = check(r, direction == Direction::kToHost ? "cuMemcpyDtoHAsync_v2" : "cuMemcpyHtoDAsync_v2");
    if (!st.isOk()) return st;
    i = j;
  }
  return Status::ok();
}

Status BlockTransfer::runKernel(Lane& lane, Direction direction, const BlockCopy* copies, size_t count) {
  CUfunction fn = nullptr;
  Status st = device_.moveKernel(&fn);
  if (!st.isOk()) return st;
  const uint64_t tableBytes = uint64_t{count} * 2 * sizeof(uint64_t);
  if (lane.table.bytes() < tableBytes) {  // grows to the largest lease seen; reused after each wait
    const uint64_t bytes = std::max<uint64_t>(tableBytes, 64 * 1024);
    st = lane.table.allocate(device_, bytes);
    if (st.isOk()) st = lane.deviceTable.allocate(device_, bytes);
    if (!st.isOk()) {
      lane.table.reset();  // both or neither: the size check above reads only the pinned one
      return st;
    }
  }
  auto* table = reinterpret_cast<uint64_t*>(lane.table.host());
  for (size_t i = 0; i < count; ++i) {
    const bool toHost = direction == Direction::kToHost;
    table[2 * i] = toHost ? copies[i].device : copies[i].hostMapped;
    table[2 * i + 1] = toHost ? copies[i].hostMapped : copies[i].device;
  }
  // The table's copy and the launch are ordered on the lane's stream.
  st = check(
      device_.api().cuMemcpyHtoDAsync(lane.deviceTable.address(), lane.table.host(), tableBytes, lane.stream.get()),
      "cuMemcpyHtoDAsync_v2");
  if (!st.isOk()) return st;
  CUdeviceptr tableAddress = lane.deviceTable.address();
  unsigned blocks = static_cast<unsigned>(count);
  unsigned long long vecs = blockBytes_ / 16;
  const uint64_t ctas = (vecs + kThreads * kVecsPerThread - 1) / (kThreads * kVecsPerThread);
  const unsigned gridX = static_cast<unsigned>(std::min<uint64_t>(std::max<uint64_t>(ctas, 1), kMaxCtasPerBlock));
  const unsigned gridY = std::min<unsigned>(blocks, kMaxGridY);
  void* params[] = {&tableAddress, &blocks, &vecs};
  return check(device_.api().cuLaunchKernel(fn, gridX, gridY, 1, kThreads, 1, 1, 0, lane.stream.get(), params, nullptr),
               "cuLaunchKernel");
}

}  // namespace kvfabric::cuda
