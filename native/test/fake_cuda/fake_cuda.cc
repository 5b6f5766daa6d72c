// A stand-in CUDA driver (and NVRTC) on host memory, for tests only: it lets the CUDA backend's code
// (loading, streams, events, chunked pools, 2D copies, batched tier moves, the kernel launch path, IPC
// export) run on a machine without a GPU, under ASan/UBSan too. It is not GPU verification: device
// pointers are host addresses and "kernels" are C++ loops.
//  - Streams run their work on a worker thread, so a caller that does not wait reads stale bytes.
//  - Device ranges are checked against live allocations: a copy that leaves its allocation (say across
//    two pool chunks) fails with CUDA_ERROR_INVALID_VALUE like the real driver would.
//  - NVRTC "compiles" by returning the source; the module exposes kvf_move_blocks only.
// Knobs: KVFABRIC_FAKECUDA_INIT_ERROR=<code> makes cuInit fail; KVFABRIC_FAKECUDA_DELAY_US delays
// every queued operation; KVFABRIC_FAKECUDA_TOTAL_MIB sets the device size (default 8192).
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "cuda_driver.h"

#define FAKE_API extern "C" __attribute__((visibility("default")))

namespace {

constexpr CUresult kSuccess = 0;
constexpr CUresult kInvalidValue = 1;
constexpr CUresult kOutOfMemory = 2;
constexpr CUresult kInvalidDevice = 101;
constexpr CUresult kNotFound = 500;

uint64_t envNumber(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 10) : fallback;
}

// Live allocations: base -> size; device memory and mapped pinned memory alike.
std::mutex g_allocMu;
std::map<uintptr_t, size_t> g_allocs;
uint64_t g_deviceBytes = 0;

bool inAllocation(uintptr_t p, size_t len) {
  std::lock_guard<std::mutex> lock(g_allocMu);
  auto it = g_allocs.upper_bound(p);
  if (it == g_allocs.begin()) return false;
  --it;
  return p >= it->first && p + len <= it->first + it->second && p + len >= p;
}

class Queue {
 public:
  Queue() : worker_([this] { loop(); }) {}
  ~Queue() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
  void push(std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      work_.push_back(std::move(fn));
      ++queued_;
    }
    cv_.notify_all();
  }
  void drain() {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t target = queued_;
    cv_.wait(lock, [&] { return done_ >= target; });
  }

 private:
  void loop() {
    const uint64_t delayUs = envNumber("KVFABRIC_FAKECUDA_DELAY_US", 0);
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !work_.empty(); });
      if (work_.empty()) return;  // stop_ and drained
      std::function<void()> fn = std::move(work_.front());
      work_.pop_front();
      lock.unlock();
      if (delayUs) std::this_thread::sleep_for(std::chrono::microseconds(delayUs));
      fn();
      lock.lock();
      ++done_;
      cv_.notify_all();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> work_;
  uint64_t queued_ = 0, done_ = 0;
  bool stop_ = false;
  std::thread worker_;
};

struct EventState {
  std::mutex mu;
  std::condition_variable cv;
  uint64_t recorded = 0, completed = 0;
};
struct EventBox {
  std::shared_ptr<EventState> state = std::make_shared<EventState>();
};

Queue& queueOf(CUstream s) {
  static Queue* legacy = new Queue();  // stream 0; leaked on purpose: outlives every caller
  return s ? *reinterpret_cast<Queue*>(s) : *legacy;
}

struct FakeModule {
  int marker = 0;
};
int g_function = 0;  // the address of this is kvf_move_blocks

}  // namespace

FAKE_API CUresult cuInit(unsigned) {
  return static_cast<CUresult>(envNumber("KVFABRIC_FAKECUDA_INIT_ERROR", 0));
}
FAKE_API CUresult cuGetErrorName(CUresult r, const char** name) {
  switch (r) {
    case 0: *name = "CUDA_SUCCESS"; break;
    case 1: *name = "CUDA_ERROR_INVALID_VALUE"; break;
    case 2: *name = "CUDA_ERROR_OUT_OF_MEMORY"; break;
    case 3: *name = "CUDA_ERROR_NOT_INITIALIZED"; break;
    case 100: *name = "CUDA_ERROR_NO_DEVICE"; break;
    case 101: *name = "CUDA_ERROR_INVALID_DEVICE"; break;
    case 500: *name = "CUDA_ERROR_NOT_FOUND"; break;
    default: *name = nullptr; return kInvalidValue;
  }
  return kSuccess;
}
FAKE_API CUresult cuDeviceGetCount(int* n) {
  *n = 1;
  return kSuccess;
}
FAKE_API CUresult cuDeviceGet(CUdevice* d, int index) {
  if (index != 0) return kInvalidDevice;
  *d = 0;
  return kSuccess;
}
FAKE_API CUresult cuDeviceGetName(char* name, int len, CUdevice) {
  std::snprintf(name, static_cast<size_t>(len), "kvfabric fake CUDA device (host memory)");
  return kSuccess;
}
FAKE_API CUresult cuDeviceGetAttribute(int* v, CUdevice_attribute attr, CUdevice) {
  switch (attr) {
    case 75: *v = 9; break;  // compute capability 9.0
    case 76: *v = 0; break;
    default: *v = 1; break;  // can map host memory, unified addressing, ...
  }
  return kSuccess;
}
FAKE_API CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice) {
  *bytes = envNumber("KVFABRIC_FAKECUDA_TOTAL_MIB", 8192) << 20;
  return kSuccess;
}
FAKE_API CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice) {
  static int context = 0;
  *ctx = reinterpret_cast<CUcontext>(&context);
  return kSuccess;
}
FAKE_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice) { return kSuccess; }
FAKE_API CUresult cuCtxSetCurrent(CUcontext) { return kSuccess; }
FAKE_API CUresult cuMemGetInfo_v2(size_t* freeBytes, size_t* total) {
  cuDeviceTotalMem_v2(total, 0);
  std::lock_guard<std::mutex> lock(g_allocMu);
  *freeBytes = *total > g_deviceBytes ? *total - g_deviceBytes : 0;
  return kSuccess;
}

static CUresult fakeAlloc(void** p, size_t bytes, size_t align, bool device) {
  if (bytes == 0) return kInvalidValue;
  if (device) {
    size_t total = 0, freeBytes = 0;
    cuMemGetInfo_v2(&freeBytes, &total);
    if (bytes > freeBytes) return kOutOfMemory;
  }
  *p = std::aligned_alloc(align, (bytes + align - 1) / align * align);
  if (!*p) return kOutOfMemory;
  std::memset(*p, 0xA5, bytes);  // never zero, like the real driver: the backend must scrub
  std::lock_guard<std::mutex> lock(g_allocMu);
  g_allocs[reinterpret_cast<uintptr_t>(*p)] = bytes;
  if (device) g_deviceBytes += bytes;
  return kSuccess;
}
static CUresult fakeFree(void* p, bool device) {
  std::lock_guard<std::mutex> lock(g_allocMu);
  auto it = g_allocs.find(reinterpret_cast<uintptr_t>(p));
  if (it == g_allocs.end()) return kInvalidValue;
  if (device) g_deviceBytes -= it->second;
  g_allocs.erase(it);
  std::free(p);
  return kSuccess;
}

FAKE_API CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytes) {
  void* p = nullptr;
  const CUresult r = fakeAlloc(&p, bytes, 256, true);
  *dptr = reinterpret_cast<CUdeviceptr>(p);
  return r;
}
FAKE_API CUresult cuMemFree_v2(CUdeviceptr dptr) { return fakeFree(reinterpret_cast<void*>(dptr), true); }
FAKE_API CUresult cuMemHostAlloc(void** p, size_t bytes, unsigned) { return fakeAlloc(p, bytes, 4096, false); }
FAKE_API CUresult cuMemFreeHost(void* p) { return fakeFree(p, false); }
FAKE_API CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* dptr, void* p, unsigned) {
  if (!inAllocation(reinterpret_cast<uintptr_t>(p), 1)) return kInvalidValue;
  *dptr = reinterpret_cast<CUdeviceptr>(p);
  return kSuccess;
}

FAKE_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t bytes, CUstream s) {
  if (!inAllocation(dst, bytes)) return kInvalidValue;
  queueOf(s).push([=] { std::memcpy(reinterpret_cast<void*>(dst), src, bytes); });
  return kSuccess;
}
FAKE_API CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t bytes, CUstream s) {
  if (!inAllocation(src, bytes)) return kInvalidValue;
  queueOf(s).push([=] { std::memcpy(dst, reinterpret_cast<const void*>(src), bytes); });
  return kSuccess;
}
FAKE_API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream s) {
  if (!inAllocation(dst, bytes) || !inAllocation(src, bytes)) return kInvalidValue;
  queueOf(s).push([=] { std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes); });
  return kSuccess;
}
FAKE_API CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D* c, CUstream s) {
  const auto side = [](CUmemorytype type, const void* host, CUdeviceptr device, size_t x, size_t y, size_t pitch,
                       size_t width, size_t height, uintptr_t* base) {
    if (type == 1) {
      *base = reinterpret_cast<uintptr_t>(host) + y * pitch + x;
      return true;
    }
    if (type != 2) return false;
    *base = device + y * pitch + x;
    return height == 0 || inAllocation(*base, (height - 1) * pitch + width);
  };
  if (c->srcPitch < c->WidthInBytes || c->dstPitch < c->WidthInBytes) return kInvalidValue;
  uintptr_t src = 0, dst = 0;
  if (!side(c->srcMemoryType, c->srcHost, c->srcDevice, c->srcXInBytes, c->srcY, c->srcPitch, c->WidthInBytes,
            c->Height, &src) ||
      !side(c->dstMemoryType, c->dstHost, c->dstDevice, c->dstXInBytes, c->dstY, c->dstPitch, c->WidthInBytes,
            c->Height, &dst)) {
    return kInvalidValue;
  }
  const size_t width = c->WidthInBytes, height = c->Height, sp = c->srcPitch, dp = c->dstPitch;
  queueOf(s).push([=] {
    for (size_t row = 0; row < height; ++row) {
      std::memcpy(reinterpret_cast<void*>(dst + row * dp), reinterpret_cast<const void*>(src + row * sp), width);
    }
  });
  return kSuccess;
}
FAKE_API CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t bytes, CUstream s) {
  if (!inAllocation(dst, bytes)) return kInvalidValue;
  queueOf(s).push([=] { std::memset(reinterpret_cast<void*>(dst), value, bytes); });
  return kSuccess;
}

FAKE_API CUresult cuStreamCreate(CUstream* s, unsigned) {
  *s = reinterpret_cast<CUstream>(new Queue());
  return kSuccess;
}
FAKE_API CUresult cuStreamDestroy_v2(CUstream s) {
  delete reinterpret_cast<Queue*>(s);  // runs what is queued, then stops
  return kSuccess;
}
FAKE_API CUresult cuStreamSynchronize(CUstream s) {
  queueOf(s).drain();
  return kSuccess;
}
FAKE_API CUresult cuEventCreate(CUevent* e, unsigned) {
  *e = reinterpret_cast<CUevent>(new EventBox());
  return kSuccess;
}
FAKE_API CUresult cuEventDestroy_v2(CUevent e) {
  delete reinterpret_cast<EventBox*>(e);
  return kSuccess;
}
FAKE_API CUresult cuEventRecord(CUevent e, CUstream s) {
  std::shared_ptr<EventState> state = reinterpret_cast<EventBox*>(e)->state;
  uint64_t generation;
  {
    std::lock_guard<std::mutex> lock(state->mu);
    generation = ++state->recorded;
  }
  queueOf(s).push([state, generation] {
    std::lock_guard<std::mutex> lock(state->mu);
    if (state->completed < generation) state->completed = generation;
    state->cv.notify_all();
  });
  return kSuccess;
}
FAKE_API CUresult cuEventSynchronize(CUevent e) {
  EventState& state = *reinterpret_cast<EventBox*>(e)->state;
  std::unique_lock<std::mutex> lock(state.mu);
  const uint64_t target = state.recorded;
  state.cv.wait(lock, [&] { return state.completed >= target; });
  return kSuccess;
}
FAKE_API CUresult cuIpcGetMemHandle(CUipcMemHandle* handle, CUdeviceptr base) {
  {
    std::lock_guard<std::mutex> lock(g_allocMu);
    if (!g_allocs.count(base)) return kInvalidValue;
  }
  std::memset(handle->reserved, 0, sizeof(handle->reserved));
  std::memcpy(handle->reserved, "kvfabric-fake-ipc", 17);
  std::memcpy(handle->reserved + 32, &base, sizeof(base));
  return kSuccess;
}

FAKE_API CUresult cuModuleLoadData(CUmodule* m, const void* image) {
  if (!std::strstr(static_cast<const char*>(image), "kvf_move_blocks")) return kInvalidValue;
  *m = reinterpret_cast<CUmodule>(new FakeModule());
  return kSuccess;
}
FAKE_API CUresult cuModuleUnload(CUmodule m) {
  delete reinterpret_cast<FakeModule*>(m);
  return kSuccess;
}
FAKE_API CUresult cuModuleGetFunction(CUfunction* f, CUmodule, const char* name) {
  if (std::strcmp(name, "kvf_move_blocks") != 0) return kNotFound;
  *f = reinterpret_cast<CUfunction>(&g_function);
  return kSuccess;
}
// kvf_move_blocks(table, count, vecs): the kernel's contract, checked as a GPU would fault.
FAKE_API CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                 unsigned bz, unsigned, CUstream s, void** params, void** extra) {
  if (f != reinterpret_cast<CUfunction>(&g_function) || extra || !params) return kInvalidValue;
  if (gx == 0 || gy == 0 || gz != 1 || bx == 0 || bx > 1024 || by != 1 || bz != 1 || gy > 65535) return kInvalidValue;
  const CUdeviceptr table = *static_cast<CUdeviceptr*>(params[0]);
  const unsigned count = *static_cast<unsigned*>(params[1]);
  const unsigned long long vecs = *static_cast<unsigned long long*>(params[2]);
  if (!inAllocation(table, size_t{count} * 16)) return kInvalidValue;
  queueOf(s).push([=] {
    const auto* pairs = reinterpret_cast<const uint64_t*>(table);
    for (unsigned b = 0; b < count; ++b) {
      const size_t bytes = vecs * 16;
      if (pairs[2 * b] % 16 || pairs[2 * b + 1] % 16 || !inAllocation(pairs[2 * b], bytes) ||
          !inAllocation(pairs[2 * b + 1], bytes)) {
        std::fprintf(stderr, "fake CUDA: kvf_move_blocks faulted on block %u\n", b);
        std::abort();  // a real kernel would take the context down
      }
      std::memcpy(reinterpret_cast<void*>(pairs[2 * b + 1]), reinterpret_cast<const void*>(pairs[2 * b]), bytes);
    }
  });
  return kSuccess;
}

// ---- NVRTC ----

struct FakeProgram {
  std::string source;
};
FAKE_API nvrtcResult nvrtcCreateProgram(nvrtcProgram* p, const char* src, const char*, int, const char* const*,
                                        const char* const*) {
  *p = reinterpret_cast<nvrtcProgram>(new FakeProgram{src});
  return 0;
}
FAKE_API nvrtcResult nvrtcCompileProgram(nvrtcProgram, int, const char* const*) { return 0; }
FAKE_API nvrtcResult nvrtcGetPTXSize(nvrtcProgram p, size_t* size) {
  *size = reinterpret_cast<FakeProgram*>(p)->source.size() + 1;
  return 0;
}
FAKE_API nvrtcResult nvrtcGetPTX(nvrtcProgram p, char* out) {
  const std::string& s = reinterpret_cast<FakeProgram*>(p)->source;
  std::memcpy(out, s.c_str(), s.size() + 1);
  return 0;
}
FAKE_API nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram, size_t* size) {
  *size = 1;
  return 0;
}
FAKE_API nvrtcResult nvrtcGetProgramLog(nvrtcProgram, char* log) {
  *log = 0;
  return 0;
}
FAKE_API nvrtcResult nvrtcDestroyProgram(nvrtcProgram* p) {
  delete reinterpret_cast<FakeProgram*>(*p);
  *p = nullptr;
  return 0;
}
