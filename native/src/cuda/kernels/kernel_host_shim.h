// Compiles the kernels in this folder as plain C++, for the test-only stand-in driver and the core
// test: the launch geometry becomes thread-local variables that the caller sets before each "thread"
// runs the kernel function. The kernels use no shared memory or barriers, so one thread after another
// is a faithful schedule. Not GPU verification: hardware can still differ (docs/cuda.md).
#pragma once

namespace kvfabric::kernel_host {
struct Dim3 {
  unsigned x = 0, y = 0, z = 0;
};
}  // namespace kvfabric::kernel_host

inline thread_local kvfabric::kernel_host::Dim3 gridDim, blockDim, blockIdx, threadIdx;

#define __global__
#define __device__
