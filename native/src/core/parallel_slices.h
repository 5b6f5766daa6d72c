// Splitting a byte copy over a few threads: one core's copy does not reach the memory's bandwidth
// (bench/tiers.bench.ts), so tier moves and plane-major exports share their blocks out.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

namespace kvfabric {

// Copies at least this big are split across threads: one core's copy does not reach the memory's
// bandwidth (bench/tiers.bench.ts). A thread starts in tens of microseconds and 8 MiB take a core about
// a millisecond to copy: below that a split is not worth its threads.
constexpr uint64_t kParallelCopyBytes = uint64_t{8} << 20;
constexpr size_t kMaxCopyThreads = 4;
constexpr size_t kRunsPerThread = 8;  // runs handed out per thread, on average: small enough to even out a stall

// Runs body(begin, end) over [0, count) on up to that many threads (this one included), handing out
// runs of a few blocks from one counter: a thread the system preempts (a worker's core is shared with
// the Temporal SDK and the server) leaves its share to the others instead of holding the whole move up.
// A thread the system will not start is simply not there: never an exception out of here.
template <typename Body>
void inSlices(size_t count, uint64_t bytes, const Body& body) {
  static const size_t cores = std::max(1u, std::thread::hardware_concurrency());
  const size_t threads = bytes < kParallelCopyBytes ? 1 : std::min({cores, kMaxCopyThreads, count});
  if (threads <= 1) {
    body(0, count);
    return;
  }
  const size_t run = std::max<size_t>(1, count / (threads * kRunsPerThread));
  std::atomic<size_t> next{0};
  const auto work = [&] {
    for (size_t begin; (begin = next.fetch_add(run)) < count;) body(begin, std::min(count, begin + run));
  };
  std::vector<std::thread> helpers;
  try {
    helpers.reserve(threads - 1);
    for (size_t t = 1; t < threads; ++t) helpers.emplace_back(work);
  } catch (...) {
    // Fewer helpers: the runs are shared among those that started.
  }
  work();
  for (std::thread& helper : helpers) helper.join();
}

}  // namespace kvfabric
