// runTransferBench: see transfer_bench.h. Blocks are shuffled on both sides, so no two neighbours merge
// and the copies way is exactly one copy call per block: the worst case a long-lived pool reaches.
#include "transfer_bench.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <numeric>
#include <random>
#include <thread>

#include "block_transfer.h"
#include "cuda_block_memory.h"

namespace kvfabric::cuda {
namespace {

// One direction's buffers: totalBytes of device memory and of pinned host memory, in chunks.
struct BufferSet {
  std::vector<DeviceBuffer> device;
  std::vector<PinnedBuffer> host;
};

Status allocate(const CudaDevice& dev, uint64_t total, BufferSet* set) {
  for (uint64_t done = 0; done < total;) {
    const uint64_t bytes = std::min(total - done, kMaxChunkBytes);
    set->device.emplace_back();
    set->host.emplace_back();
    Status st = set->device.back().allocate(dev, bytes);
    if (st.isOk()) st = set->host.back().allocate(dev, bytes);
    if (!st.isOk()) return st;
    done += bytes;
  }
  return Status::ok();
}

// Every block of the set, device and host frames each in a random order.
std::vector<BlockCopy> scattered(const BufferSet& set, uint64_t blockBytes, uint64_t total, uint32_t seed) {
  const uint64_t perChunk = kMaxChunkBytes / blockBytes;
  const uint64_t blocks = total / blockBytes;
  std::vector<uint64_t> deviceOrder(blocks), hostOrder(blocks);
  std::iota(deviceOrder.begin(), deviceOrder.end(), 0);
  std::iota(hostOrder.begin(), hostOrder.end(), 0);
  std::mt19937 rng(seed);
  std::shuffle(deviceOrder.begin(), deviceOrder.end(), rng);
  std::shuffle(hostOrder.begin(), hostOrder.end(), rng);
  std::vector<BlockCopy> copies(blocks);
  for (uint64_t i = 0; i < blocks; ++i) {
    const uint64_t d = deviceOrder[i], h = hostOrder[i];
    const uint32_t dc = static_cast<uint32_t>(d / perChunk), hc = static_cast<uint32_t>(h / perChunk);
    const uint64_t doff = (d % perChunk) * blockBytes, hoff = (h % perChunk) * blockBytes;
    copies[i] = {set.device[dc].address() + doff, dc, set.host[hc].host() + hoff, set.host[hc].mapped() + hoff, hc};
  }
  return copies;
}

// Whole chunks, each as one copy: the contiguous ceiling (a 2 GiB chunk is one DMA either way).
std::vector<BlockCopy> contiguous(const BufferSet& set) {
  std::vector<BlockCopy> copies;
  for (uint32_t c = 0; c < set.device.size(); ++c) {
    copies.push_back({set.device[c].address(), c, set.host[c].host(), set.host[c].mapped(), c});
  }
  return copies;
}

double secondsOf(const std::function<Status()>& body, Status* st) {
  const auto start = std::chrono::steady_clock::now();
  *st = body();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

Status runTransferBench(const TransferBenchConfig& config, TransferBenchResult* out) {
  const CudaDevice* dev = nullptr;
  Status st = CudaDevice::get(config.device, &dev);
  if (!st.isOk()) return st;
  out->deviceName = dev->name();
  BufferSet offload, restore;  // duplex moves offload's blocks out while restore's come in
  st = allocate(*dev, config.totalBytes, &offload);
  if (st.isOk()) st = allocate(*dev, config.totalBytes, &restore);
  if (!st.isOk()) return st;

  // Best of `repeats` of one figure, each direction on its own transfer lane (duplex: at once).
  auto measure = [&](const char* way, const char* direction, uint64_t blockBytes, uint64_t transferBlockBytes,
                     const std::vector<BlockCopy>& outgoing, const std::vector<BlockCopy>& incoming, TransferWay tw) {
    TransferFigure f{way, direction, blockBytes, 0, 1e30, ""};
    BlockTransfer transfer(*dev, transferBlockBytes);
    Status s = transfer.init();
    const bool d2h = f.direction != "h2d", h2d = f.direction != "d2h";
    f.bytes = (d2h ? config.totalBytes : 0) + (h2d ? config.totalBytes : 0);
    for (int r = 0; s.isOk() && r < config.repeats + 1; ++r) {  // the first run warms up
      Status a, b;
      const double t = secondsOf(
          [&] {
            std::thread other;
            if (d2h && h2d)
              other =
                  std::thread([&] { b = transfer.run(Direction::kToDevice, incoming.data(), incoming.size(), tw); });
            if (d2h) a = transfer.run(Direction::kToHost, outgoing.data(), outgoing.size(), tw);
            if (!d2h) a = transfer.run(Direction::kToDevice, incoming.data(), incoming.size(), tw);
            if (other.joinable()) other.join();
            return a.isOk() ? b : a;
          },
          &s);
      if (r > 0) f.seconds = std::min(f.seconds, t);
    }
    if (!s.isOk()) f.skipped = s.message();
    out->figures.push_back(f);
  };

  BlockTransfer probe(*dev, 16);
  std::string why;
  out->kernelStatus = probe.resolve(TransferWay::kKernel, &why) == TransferWay::kKernel ? "ready" : why;
  // Contiguous ceiling: chunk-sized copies; block size argument is the chunk size.
  const std::vector<BlockCopy> outWhole = contiguous(offload), inWhole = contiguous(restore);
  const uint64_t chunk = std::min(config.totalBytes, kMaxChunkBytes);
  if (config.totalBytes % chunk != 0)
    return Status(Code::kInvalidArgument, "total must be a multiple of 2 GiB or below it");
  for (const char* d : {"d2h", "h2d", "duplex"})
    measure("contiguous", d, 0, chunk, outWhole, inWhole, TransferWay::kCopies);
  for (uint64_t bb : config.blockBytes) {
    if (bb == 0 || config.totalBytes % bb != 0 || kMaxChunkBytes % bb != 0) {
      return Status(Code::kInvalidArgument, "block sizes must divide the total and 2 GiB");
    }
    const std::vector<BlockCopy> outBlocks = scattered(offload, bb, config.totalBytes, 1);
    const std::vector<BlockCopy> inBlocks = scattered(restore, bb, config.totalBytes, 2);
    for (TransferWay way : {TransferWay::kCopies, TransferWay::kKernel}) {
      for (const char* d : {"d2h", "h2d", "duplex"}) measure(transferWayName(way), d, bb, bb, outBlocks, inBlocks, way);
    }
  }
  return Status::ok();
}

}  // namespace kvfabric::cuda
