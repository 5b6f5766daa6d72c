// A strict stand-in CUDA driver (and NVRTC) on host memory, for tests only. It lets the CUDA backend's
// code run on a machine without a GPU, under ASan/UBSan too, and it enforces the driver API's documented
// rules that a lenient stand-in would let slide, so mistakes that would fail on hardware fail here first.
// It is not GPU verification: device pointers are host addresses and kernels run on the CPU (the
// checksum kernel's own source, compiled as C++; the move kernel as its contract).
// What it enforces (docs/cuda.md has the list and what only hardware can show):
//  - A thread-local stack of current contexts: a call that needs one without it gets
//    CUDA_ERROR_INVALID_CONTEXT; streams and events belong to the context that made them.
//  - Two devices, each with a primary context (retain counts, scheduling flags); with
//    KVFABRIC_FAKECUDA_ENGINE_CONTEXT=1 every thread starts with another engine's context current, and
//    cuCtxSetCurrent over it counts as displacing it.
//  - Device allocations are rounded up to 2 MiB granules; allocations under 2 MiB are carved from a shared
//    2 MiB block, and an IPC handle maps that whole block in the importing process (memfd-backed, so a
//    second process really sees the bytes), as a GPU's IPC would.
//  - cuMemGetInfo keeps a reserve for the context itself; a module load takes device memory.
//  - A registry of pinned ranges: copies from or to pageable host memory run synchronously and are
//    counted; a kernel may touch only device memory and mapped pinned memory.
//  - Sticky, context-wide faults (illegal address, misaligned address, launch failure): a kernel that
//    touches a bad address, or an injected fault, makes every later call in that context fail.
//  - PTX carries its ISA version, checked against the emulated driver version; a CUBIN must match the
//    device's compute capability. Only the symbol names cuda.h maps to are exported (the _v2 ones).
//  - Waits on events created without CU_EVENT_BLOCKING_SYNC, and stream waits in a context without
//    CU_CTX_SCHED_BLOCKING_SYNC, fail with CUDA_ERROR_NOT_PERMITTED: a real driver would spin a core.
//  - Streams run their work on a worker thread (a missing wait reads stale bytes); cuStreamDestroy
//    returns at once while the work still runs; after exit starts every call returns
//    CUDA_ERROR_DEINITIALIZED (and says so on stderr).
// Knobs (environment, read by this library only):
//   KVFABRIC_FAKECUDA_INIT_ERROR=<code>   cuInit fails
//   KVFABRIC_FAKECUDA_DELAY_US=<us>       every queued operation waits this long first
//   KVFABRIC_FAKECUDA_TOTAL_MIB=<MiB>     device size (default 8192); KVFABRIC_FAKECUDA_RESERVE_MIB (default 64)
//   KVFABRIC_FAKECUDA_DRIVER_VERSION      cuDriverGetVersion (default 13000)
//   KVFABRIC_FAKECUDA_NVRTC_VERSION       nvrtcVersion as major.minor (default: the driver's)
//   KVFABRIC_FAKECUDA_FAIL=<call>:<n>:<code>[,...]  the n-th call (n = *: every call) of <call> fails with
//       <code>; a sticky code on cuLaunchKernel faults while the kernel runs, as on a GPU, unless written
//       =<code>: then the launch itself returns it, as when the context was already poisoned
//   KVFABRIC_FAKECUDA_ENGINE_CONTEXT=1    see above
//   KVFABRIC_FAKECUDA_FLIP_UPLOADS=<bytes>  every host-to-device copy, and every block the move kernel
//       writes to device memory, of at least <bytes> lands with its last byte flipped (a bad link)
//   KVFABRIC_FAKECUDA_REPORT=<file>       at exit, JSON counters: pageableCopies, displacedContexts,
//       mainThreadContext, primaryRetains, kernelHostTables, faults
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cuda_driver.h"

// The page-checksum kernel's own source, compiled for the CPU: a launch runs the code NVRTC compiles.
#include "kernel_host_shim.h"
#pragma GCC visibility push(hidden)
#include "sum_planes.cu"
#pragma GCC visibility pop

#define FAKE_API extern "C" __attribute__((visibility("default")))

namespace {

constexpr CUresult kSuccess = 0;
constexpr CUresult kInvalidValue = 1;
constexpr CUresult kOutOfMemory = 2;
constexpr CUresult kNotInitialized = 3;
constexpr CUresult kDeinitialized = 4;
constexpr CUresult kInvalidDevice = 101;
constexpr CUresult kInvalidContext = 201;
constexpr CUresult kNoBinaryForGpu = 209;
constexpr CUresult kUnsupportedPtxVersion = 222;
constexpr CUresult kInvalidHandle = 400;
constexpr CUresult kNotFound = 500;
constexpr CUresult kIllegalAddress = 700;
constexpr CUresult kMisalignedAddress = 716;
constexpr CUresult kNotPermitted = 800;
constexpr unsigned kEventBlockingSync = 0x1;
constexpr unsigned kCtxSchedBlockingSync = 0x4;
constexpr size_t kGranule = size_t{2} << 20;
constexpr int kDevices = 2;

bool isSticky(CUresult r) { return r == 700 || r == 702 || (r >= 714 && r <= 719); }

uint64_t envNumber(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 10) : fallback;
}

int driverVersion() { return static_cast<int>(envNumber("KVFABRIC_FAKECUDA_DRIVER_VERSION", 13000)); }

struct Ctx {
  int device = 0;
  bool engine = false;
  std::atomic<CUresult> sticky{0};
};

// A memfd-backed stretch of "device memory": one or more 2 MiB granules.
struct Block {
  int fd = -1;
  uint8_t* base = nullptr;
  size_t size = 0;
  size_t used = 0;  // bump pointer for a shared small-allocation block
  int live = 0;
  int device = 0;
  bool shared = false;
};

enum class Kind { kDevice, kPinned, kImported, kModule };
struct Alloc {
  size_t size;
  Kind kind;
  int device;  // -1 for pinned (portable)
  Block* block;
};

// Everything global lives in one leaked object: stream threads may still run while statics die at exit.
struct State {
  std::mutex mu;
  std::map<uintptr_t, Alloc> allocs;
  Block* openSlab[kDevices] = {nullptr, nullptr};
  uint64_t used[kDevices] = {0, 0};
  Ctx primary[kDevices];
  Ctx engine;
  int retains[kDevices] = {0, 0};
  unsigned flags[kDevices] = {0, 0};
  bool initialized = false;
  std::atomic<bool> deinitialized{false};
  std::atomic<uint64_t> pageableCopies{0}, displacedContexts{0}, kernelHostTables{0}, faults{0};
  std::atomic<int> waiting{0};  // threads inside a blocking driver call
  std::map<std::string, uint64_t> calls;
};
State& S() {
  static State* s = new State();
  return *s;
}

thread_local Ctx* t_stack[16];
thread_local int t_depth = 0;
thread_local bool t_seeded = false;

Ctx* current() {
  if (!t_seeded) {
    t_seeded = true;
    if (envNumber("KVFABRIC_FAKECUDA_ENGINE_CONTEXT", 0)) t_stack[t_depth++] = &S().engine;
  }
  return t_depth ? t_stack[t_depth - 1] : nullptr;
}

// Whether the last injected fault on this thread was asked to show at the call ("=<code>"), not later.
thread_local bool t_injectedAtCall = false;

// Fault injection: the n-th call of a named entry point returns the configured code.
CUresult injected(const char* name) {
  t_injectedAtCall = false;
  const char* spec = std::getenv("KVFABRIC_FAKECUDA_FAIL");
  if (!spec || !*spec) return kSuccess;
  uint64_t n;
  {
    std::lock_guard<std::mutex> lock(S().mu);
    n = ++S().calls[name];
  }
  std::string all(spec);
  size_t at = 0;
  while (at <= all.size()) {
    size_t end = all.find(',', at);
    if (end == std::string::npos) end = all.size();
    const std::string item = all.substr(at, end - at);
    const size_t c1 = item.find(':'), c2 = item.rfind(':');
    const bool every = c1 != std::string::npos && item.compare(c1 + 1, 1, "*") == 0;
    if (c1 != std::string::npos && c2 != c1 && item.substr(0, c1) == name &&
        (every || std::strtoull(item.c_str() + c1 + 1, nullptr, 10) == n)) {
      ++S().faults;
      const char* code = item.c_str() + c2 + 1;
      t_injectedAtCall = *code == '=';
      return static_cast<CUresult>(std::strtol(code + (t_injectedAtCall ? 1 : 0), nullptr, 10));
    }
    at = end + 1;
  }
  return kSuccess;
}

CUresult afterExit(const char* call) {
  std::fprintf(stderr, "fake CUDA: %s called after deinitialisation (process exit)\n", call);
  return kDeinitialized;
}

// The preamble of every entry point that needs the driver initialised.
#define DRIVER(call)                                    \
  if (S().deinitialized.load()) return afterExit(call); \
  if (!S().initialized) return kNotInitialized;         \
  const CUresult inj = injected(call);                  \
  if (inj != kSuccess && !isSticky(inj)) return inj;

// ...and a current context; sticky faults fail every call in the context from then on.
#define IN_CONTEXT(call)                                                       \
  DRIVER(call)                                                                 \
  Ctx* ctx = current();                                                        \
  if (!ctx) return kInvalidContext;                                            \
  if (CUresult sticky = ctx->sticky.load(); sticky != kSuccess) return sticky; \
  if (isSticky(inj)) {                                                         \
    ctx->sticky.store(inj);                                                    \
    return inj;                                                                \
  }

// Live allocation holding [p, p + len), or null.
const Alloc* findLocked(uintptr_t p, size_t len, uintptr_t* base = nullptr) {
  auto& allocs = S().allocs;
  auto it = allocs.upper_bound(p);
  if (it == allocs.begin()) return nullptr;
  --it;
  if (p < it->first || p + len > it->first + it->second.size || p + len < p) return nullptr;
  if (base) *base = it->first;
  return &it->second;
}
bool isDevice(uintptr_t p, size_t len, int device) {
  std::lock_guard<std::mutex> lock(S().mu);
  const Alloc* a = findLocked(p, len);
  return a && (a->kind == Kind::kDevice || a->kind == Kind::kImported) && a->device == device;
}
bool isPinned(uintptr_t p, size_t len) {
  std::lock_guard<std::mutex> lock(S().mu);
  const Alloc* a = findLocked(p, len);
  return a && a->kind == Kind::kPinned;
}
// What a kernel may touch: this device's memory or mapped pinned memory.
bool kernelReachable(uintptr_t p, size_t len, int device) {
  std::lock_guard<std::mutex> lock(S().mu);
  const Alloc* a = findLocked(p, len);
  return a && (a->kind == Kind::kPinned ||
               ((a->kind == Kind::kDevice || a->kind == Kind::kImported) && a->device == device));
}

class Queue {
 public:
  explicit Queue(Ctx* ctx) : ctx_(ctx), worker_([this] { loop(); }) {}
  Ctx* ctx() const { return ctx_; }
  // `always`: runs even after the context faulted (event completion, so waiters wake and see the fault).
  void push(std::function<void()> fn, bool always = false) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      work_.push_back({std::move(fn), always});
      ++queued_;
    }
    cv_.notify_all();
  }
  void drain() {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t target = queued_;
    cv_.wait(lock, [&] { return done_ >= target; });
  }
  // cuStreamDestroy: returns at once; the queued work still runs, then the queue frees itself.
  void retire() {
    worker_.detach();  // first: once stop_ is seen the worker deletes this queue
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
  }

 private:
  void loop() {
    const uint64_t delayUs = envNumber("KVFABRIC_FAKECUDA_DELAY_US", 0);
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !work_.empty(); });
      if (work_.empty()) break;  // stop_ and drained
      Work item = std::move(work_.front());
      work_.pop_front();
      lock.unlock();
      if (delayUs && !item.always) std::this_thread::sleep_for(std::chrono::microseconds(delayUs));
      // A faulted context runs nothing more, as a GPU context after an exception.
      if (item.always || ctx_->sticky.load() == kSuccess) item.fn();
      lock.lock();
      ++done_;
      cv_.notify_all();
    }
    lock.unlock();
    delete this;
  }
  struct Work {
    std::function<void()> fn;
    bool always;
  };
  Ctx* ctx_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Work> work_;
  uint64_t queued_ = 0, done_ = 0;
  bool stop_ = false;
  std::thread worker_;
};

// The legacy stream 0 of each primary context; leaked on purpose.
Queue& queueOf(CUstream s, Ctx* ctx) {
  static Queue* legacy[kDevices] = {new Queue(&S().primary[0]), new Queue(&S().primary[1])};
  return s ? *reinterpret_cast<Queue*>(s) : *legacy[ctx->device];
}
// A stream handle used in a context other than its own.
bool foreignStream(CUstream s, Ctx* ctx) { return s && reinterpret_cast<Queue*>(s)->ctx() != ctx; }

struct EventState {
  std::mutex mu;
  std::condition_variable cv;
  uint64_t recorded = 0, completed = 0;
};
struct EventBox {
  Ctx* ctx;
  unsigned flags;
  std::shared_ptr<EventState> state = std::make_shared<EventState>();
};

struct FakeModule {
  Ctx* ctx;
  uintptr_t memory;  // the module's code and constants take device memory
};
struct FakeFunction {
  FakeModule* module;
  bool sum;  // kvf_sum_planes, else kvf_move_blocks
};

// At exit: later calls return CUDA_ERROR_DEINITIALIZED, and the report is written.
// Counts a thread inside a call that blocks, so teardown under it can be reported.
struct Waiting {
  Waiting() { ++S().waiting; }
  ~Waiting() { --S().waiting; }
};

struct ExitHook {
  ~ExitHook() {
    State& s = S();
    s.deinitialized.store(true);
    // A real driver tearing down under a thread that is inside it is undefined: say so loudly.
    if (const int n = s.waiting.load(); n > 0) {
      std::fprintf(stderr, "fake CUDA: driver torn down at exit while %d thread(s) were inside a driver call\n", n);
    }
    const char* path = std::getenv("KVFABRIC_FAKECUDA_REPORT");
    if (!path || !*path) return;
    const char* mainCtx = t_depth == 0 ? "none" : t_stack[t_depth - 1]->engine ? "engine" : "kvfabric";
    if (FILE* f = std::fopen(path, "w")) {
      std::fprintf(f,
                   "{\"pageableCopies\":%llu,\"displacedContexts\":%llu,\"mainThreadContext\":\"%s\","
                   "\"primaryRetains\":[%d,%d],\"kernelHostTables\":%llu,\"faults\":%llu}\n",
                   static_cast<unsigned long long>(s.pageableCopies.load()),
                   static_cast<unsigned long long>(s.displacedContexts.load()), mainCtx, s.retains[0], s.retains[1],
                   static_cast<unsigned long long>(s.kernelHostTables.load()),
                   static_cast<unsigned long long>(s.faults.load()));
      std::fclose(f);
    }
  }
};
ExitHook g_exitHook;

Block* newBlock(size_t bytes, int device, bool shared) {
  auto* b = new Block();
  b->size = (bytes + kGranule - 1) / kGranule * kGranule;
  b->device = device;
  b->shared = shared;
  b->fd = memfd_create("kvfabric-fakecuda", MFD_CLOEXEC);
  if (b->fd < 0 || ftruncate(b->fd, static_cast<off_t>(b->size)) != 0) {
    if (b->fd >= 0) close(b->fd);
    delete b;
    return nullptr;
  }
  void* p = mmap(nullptr, b->size, PROT_READ | PROT_WRITE, MAP_SHARED, b->fd, 0);
  if (p == MAP_FAILED) {
    close(b->fd);
    delete b;
    return nullptr;
  }
  b->base = static_cast<uint8_t*>(p);
  return b;
}
void dropBlockLocked(Block* b) {
  State& s = S();
  s.used[b->device] -= b->size;
  if (s.openSlab[b->device] == b) s.openSlab[b->device] = nullptr;
  munmap(b->base, b->size);
  close(b->fd);
  delete b;
}

uint64_t totalBytes() { return envNumber("KVFABRIC_FAKECUDA_TOTAL_MIB", 8192) << 20; }
uint64_t reserveBytes() { return envNumber("KVFABRIC_FAKECUDA_RESERVE_MIB", 64) << 20; }
uint64_t freeBytesLocked(int device) {
  const uint64_t taken = S().used[device] + reserveBytes();
  return totalBytes() > taken ? totalBytes() - taken : 0;
}

// cuMemAlloc: whole granules; under one granule, carved from a shared block (so IPC shows neighbours).
CUresult deviceAlloc(uintptr_t* out, size_t bytes, int device, Kind kind) {
  if (bytes == 0) return kInvalidValue;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  const size_t rounded = (bytes + 255) / 256 * 256;
  Block* b = nullptr;
  size_t offset = 0;
  if (rounded < kGranule) {
    b = s.openSlab[device];
    if (!b || b->used + rounded > b->size) {
      if (freeBytesLocked(device) < kGranule) return kOutOfMemory;
      b = newBlock(kGranule, device, true);
      if (!b) return kOutOfMemory;
      s.used[device] += b->size;
      s.openSlab[device] = b;
    }
    offset = b->used;
    b->used += rounded;
  } else {
    const size_t need = (bytes + kGranule - 1) / kGranule * kGranule;
    if (need > freeBytesLocked(device)) return kOutOfMemory;
    b = newBlock(need, device, false);
    if (!b) return kOutOfMemory;
    s.used[device] += b->size;
  }
  ++b->live;
  std::memset(b->base + offset, 0xA5, bytes);  // never zero, like the real driver: the backend must scrub
  *out = reinterpret_cast<uintptr_t>(b->base + offset);
  s.allocs[*out] = Alloc{bytes, kind, device, b};
  return kSuccess;
}
CUresult deviceFree(uintptr_t p, Kind kind) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.allocs.find(p);
  if (it == s.allocs.end() || it->second.kind != kind) return kInvalidValue;
  Block* b = it->second.block;
  s.allocs.erase(it);
  if (--b->live == 0) dropBlockLocked(b);
  return kSuccess;
}

// Copies that touch pageable host memory: the driver stages them synchronously.
void pageable(Queue& q, const std::function<void()>& copy) {
  const Waiting waiting;
  q.drain();
  copy();
  ++S().pageableCopies;
}

}  // namespace

// ---- initialisation, devices, contexts ----

FAKE_API CUresult cuInit(unsigned) {
  if (S().deinitialized.load()) return afterExit("cuInit");
  const CUresult r = static_cast<CUresult>(envNumber("KVFABRIC_FAKECUDA_INIT_ERROR", 0));
  if (r == kSuccess) {
    S().primary[1].device = 1;
    S().engine.engine = true;
    S().initialized = true;
  }
  return r;
}
FAKE_API CUresult cuDriverGetVersion(int* v) {
  *v = driverVersion();
  return kSuccess;
}
FAKE_API CUresult cuGetErrorName(CUresult r, const char** name) {
  switch (r) {
    case 0: *name = "CUDA_SUCCESS"; break;
    case 1: *name = "CUDA_ERROR_INVALID_VALUE"; break;
    case 2: *name = "CUDA_ERROR_OUT_OF_MEMORY"; break;
    case 3: *name = "CUDA_ERROR_NOT_INITIALIZED"; break;
    case 4: *name = "CUDA_ERROR_DEINITIALIZED"; break;
    case 100: *name = "CUDA_ERROR_NO_DEVICE"; break;
    case 101: *name = "CUDA_ERROR_INVALID_DEVICE"; break;
    case 201: *name = "CUDA_ERROR_INVALID_CONTEXT"; break;
    case 209: *name = "CUDA_ERROR_NO_BINARY_FOR_GPU"; break;
    case 222: *name = "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"; break;
    case 400: *name = "CUDA_ERROR_INVALID_HANDLE"; break;
    case 500: *name = "CUDA_ERROR_NOT_FOUND"; break;
    case 700: *name = "CUDA_ERROR_ILLEGAL_ADDRESS"; break;
    case 702: *name = "CUDA_ERROR_LAUNCH_TIMEOUT"; break;
    case 716: *name = "CUDA_ERROR_MISALIGNED_ADDRESS"; break;
    case 719: *name = "CUDA_ERROR_LAUNCH_FAILED"; break;
    case 800: *name = "CUDA_ERROR_NOT_PERMITTED"; break;
    default: *name = nullptr; return kInvalidValue;
  }
  return kSuccess;
}
FAKE_API CUresult cuDeviceGetCount(int* n) {
  DRIVER("cuDeviceGetCount");
  *n = kDevices;
  return kSuccess;
}
FAKE_API CUresult cuDeviceGet(CUdevice* d, int index) {
  DRIVER("cuDeviceGet");
  if (index < 0 || index >= kDevices) return kInvalidDevice;
  *d = index;
  return kSuccess;
}
FAKE_API CUresult cuDeviceGetName(char* name, int len, CUdevice d) {
  DRIVER("cuDeviceGetName");
  std::snprintf(name, static_cast<size_t>(len), "kvfabric fake CUDA device %d (host memory)", d);
  return kSuccess;
}
FAKE_API CUresult cuDeviceGetAttribute(int* v, CUdevice_attribute attr, CUdevice d) {
  DRIVER("cuDeviceGetAttribute");
  if (d < 0 || d >= kDevices) return kInvalidDevice;
  switch (attr) {
    case 75: *v = d == 0 ? 9 : 8; break;  // compute capability 9.0 and 8.0
    case 76: *v = 0; break;
    default: *v = 1; break;  // can map host memory, unified addressing, ...
  }
  return kSuccess;
}
FAKE_API CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice) {
  DRIVER("cuDeviceTotalMem_v2");
  *bytes = totalBytes();
  return kSuccess;
}
FAKE_API CUresult cuDevicePrimaryCtxGetState(CUdevice d, unsigned* flags, int* active) {
  DRIVER("cuDevicePrimaryCtxGetState");
  if (d < 0 || d >= kDevices) return kInvalidDevice;
  std::lock_guard<std::mutex> lock(S().mu);
  *flags = S().flags[d];
  *active = S().retains[d] > 0;
  return kSuccess;
}
FAKE_API CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice d, unsigned flags) {
  DRIVER("cuDevicePrimaryCtxSetFlags_v2");
  if (d < 0 || d >= kDevices) return kInvalidDevice;
  std::lock_guard<std::mutex> lock(S().mu);
  S().flags[d] = flags;
  return kSuccess;
}
FAKE_API CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice d) {
  DRIVER("cuDevicePrimaryCtxRetain");
  if (d < 0 || d >= kDevices) return kInvalidDevice;
  std::lock_guard<std::mutex> lock(S().mu);
  ++S().retains[d];
  *ctx = reinterpret_cast<CUcontext>(&S().primary[d]);
  return kSuccess;
}
FAKE_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) {
  DRIVER("cuDevicePrimaryCtxRelease_v2");
  if (d < 0 || d >= kDevices) return kInvalidDevice;
  std::lock_guard<std::mutex> lock(S().mu);
  if (S().retains[d] == 0) return kInvalidContext;
  --S().retains[d];
  return kSuccess;
}
FAKE_API CUresult cuCtxSetCurrent(CUcontext c) {
  DRIVER("cuCtxSetCurrent");
  Ctx* was = current();
  if (was && was->engine && reinterpret_cast<Ctx*>(c) != was) ++S().displacedContexts;
  if (!c) {
    if (t_depth) --t_depth;
  } else if (t_depth) {
    t_stack[t_depth - 1] = reinterpret_cast<Ctx*>(c);
  } else {
    t_stack[t_depth++] = reinterpret_cast<Ctx*>(c);
  }
  return kSuccess;
}
FAKE_API CUresult cuCtxGetCurrent(CUcontext* c) {
  DRIVER("cuCtxGetCurrent");
  *c = reinterpret_cast<CUcontext>(current());
  return kSuccess;
}
FAKE_API CUresult cuCtxPushCurrent_v2(CUcontext c) {
  DRIVER("cuCtxPushCurrent_v2");
  current();
  if (!c || t_depth == 16) return kInvalidValue;
  t_stack[t_depth++] = reinterpret_cast<Ctx*>(c);
  return kSuccess;
}
FAKE_API CUresult cuCtxPopCurrent_v2(CUcontext* c) {
  DRIVER("cuCtxPopCurrent_v2");
  if (!current()) return kInvalidContext;
  Ctx* top = t_stack[--t_depth];
  if (c) *c = reinterpret_cast<CUcontext>(top);
  return kSuccess;
}
FAKE_API CUresult cuMemGetInfo_v2(size_t* freeBytes, size_t* total) {
  IN_CONTEXT("cuMemGetInfo_v2");
  std::lock_guard<std::mutex> lock(S().mu);
  *total = totalBytes();
  *freeBytes = freeBytesLocked(ctx->device);
  return kSuccess;
}

// ---- memory ----

FAKE_API CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytes) {
  IN_CONTEXT("cuMemAlloc_v2");
  uintptr_t p = 0;
  const CUresult r = deviceAlloc(&p, bytes, ctx->device, Kind::kDevice);
  *dptr = p;
  return r;
}
FAKE_API CUresult cuMemFree_v2(CUdeviceptr dptr) {
  IN_CONTEXT("cuMemFree_v2");
  return deviceFree(dptr, Kind::kDevice);
}
FAKE_API CUresult cuMemHostAlloc(void** p, size_t bytes, unsigned) {
  IN_CONTEXT("cuMemHostAlloc");
  if (bytes == 0) return kInvalidValue;
  *p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
  if (!*p) return kOutOfMemory;
  std::memset(*p, 0xA5, bytes);
  std::lock_guard<std::mutex> lock(S().mu);
  S().allocs[reinterpret_cast<uintptr_t>(*p)] = Alloc{bytes, Kind::kPinned, -1, nullptr};
  return kSuccess;
}
FAKE_API CUresult cuMemFreeHost(void* p) {
  IN_CONTEXT("cuMemFreeHost");
  std::lock_guard<std::mutex> lock(S().mu);
  auto it = S().allocs.find(reinterpret_cast<uintptr_t>(p));
  if (it == S().allocs.end() || it->second.kind != Kind::kPinned) return kInvalidValue;
  S().allocs.erase(it);
  std::free(p);
  return kSuccess;
}
FAKE_API CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* dptr, void* p, unsigned) {
  IN_CONTEXT("cuMemHostGetDevicePointer_v2");
  if (!isPinned(reinterpret_cast<uintptr_t>(p), 1)) return kInvalidValue;
  *dptr = reinterpret_cast<CUdeviceptr>(p);
  return kSuccess;
}
FAKE_API CUresult cuMemGetAddressRange_v2(CUdeviceptr* base, size_t* size, CUdeviceptr p) {
  IN_CONTEXT("cuMemGetAddressRange_v2");
  std::lock_guard<std::mutex> lock(S().mu);
  uintptr_t at = 0;
  const Alloc* a = findLocked(p, 1, &at);
  if (!a) return kNotFound;
  if (base) *base = at;
  if (size) *size = a->size;
  return kSuccess;
}

// ---- copies ----

namespace {
// KVFABRIC_FAKECUDA_FLIP_UPLOADS=<bytes>: read when the work is queued.
bool flipsUpload(size_t bytes) {
  const char* v = std::getenv("KVFABRIC_FAKECUDA_FLIP_UPLOADS");
  return v != nullptr && *v != 0 && bytes >= std::strtoull(v, nullptr, 10);
}
void flipLastByte(uintptr_t dst, size_t bytes) { reinterpret_cast<uint8_t*>(dst)[bytes - 1] ^= 0x01; }
}  // namespace

FAKE_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t bytes, CUstream s) {
  IN_CONTEXT("cuMemcpyHtoDAsync_v2");
  if (foreignStream(s, ctx)) return kInvalidHandle;
  if (!isDevice(dst, bytes, ctx->device)) return kInvalidValue;
  const bool flip = flipsUpload(bytes);
  auto copy = [=] {
    std::memcpy(reinterpret_cast<void*>(dst), src, bytes);
    if (flip) flipLastByte(dst, bytes);
  };
  if (isPinned(reinterpret_cast<uintptr_t>(src), bytes)) {
    queueOf(s, ctx).push(copy);
  } else {
    pageable(queueOf(s, ctx), copy);
  }
  return kSuccess;
}
FAKE_API CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t bytes, CUstream s) {
  IN_CONTEXT("cuMemcpyDtoHAsync_v2");
  if (foreignStream(s, ctx)) return kInvalidHandle;
  if (!isDevice(src, bytes, ctx->device)) return kInvalidValue;
  auto copy = [=] { std::memcpy(dst, reinterpret_cast<const void*>(src), bytes); };
  if (isPinned(reinterpret_cast<uintptr_t>(dst), bytes)) {
    queueOf(s, ctx).push(copy);
  } else {
    pageable(queueOf(s, ctx), copy);
  }
  return kSuccess;
}
FAKE_API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream s) {
  IN_CONTEXT("cuMemcpyDtoDAsync_v2");
  if (foreignStream(s, ctx)) return kInvalidHandle;
  if (!isDevice(dst, bytes, ctx->device) || !isDevice(src, bytes, ctx->device)) return kInvalidValue;
  queueOf(s, ctx).push([=] { std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes); });
  return kSuccess;
}
FAKE_API CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D* c, CUstream s) {
  IN_CONTEXT("cuMemcpy2DAsync_v2");
  if (foreignStream(s, ctx)) return kInvalidHandle;
  if (c->srcPitch < c->WidthInBytes || c->dstPitch < c->WidthInBytes) return kInvalidValue;
  bool hostPageable = false;
  const auto side = [&](CUmemorytype type, const void* host, CUdeviceptr device, size_t x, size_t y, size_t pitch,
                        uintptr_t* base) {
    const size_t span = c->Height == 0 ? 0 : (c->Height - 1) * pitch + c->WidthInBytes;
    if (type == 1) {
      *base = reinterpret_cast<uintptr_t>(host) + y * pitch + x;
      if (span && !isPinned(*base, span)) hostPageable = true;
      return true;
    }
    if (type != 2) return false;
    *base = device + y * pitch + x;
    return span == 0 || isDevice(*base, span, ctx->device);
  };
  uintptr_t src = 0, dst = 0;
  if (!side(c->srcMemoryType, c->srcHost, c->srcDevice, c->srcXInBytes, c->srcY, c->srcPitch, &src) ||
      !side(c->dstMemoryType, c->dstHost, c->dstDevice, c->dstXInBytes, c->dstY, c->dstPitch, &dst)) {
    return kInvalidValue;
  }
  const size_t width = c->WidthInBytes, height = c->Height, sp = c->srcPitch, dp = c->dstPitch;
  auto copy = [=] {
    for (size_t row = 0; row < height; ++row) {
      std::memcpy(reinterpret_cast<void*>(dst + row * dp), reinterpret_cast<const void*>(src + row * sp), width);
    }
  };
  if (hostPageable) {
    pageable(queueOf(s, ctx), copy);
  } else {
    queueOf(s, ctx).push(copy);
  }
  return kSuccess;
}
FAKE_API CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t bytes, CUstream s) {
  IN_CONTEXT("cuMemsetD8Async");
  if (foreignStream(s, ctx)) return kInvalidHandle;
  if (!isDevice(dst, bytes, ctx->device)) return kInvalidValue;
  queueOf(s, ctx).push([=] { std::memset(reinterpret_cast<void*>(dst), value, bytes); });
  return kSuccess;
}

// ---- streams and events ----

FAKE_API CUresult cuStreamCreate(CUstream* s, unsigned) {
  IN_CONTEXT("cuStreamCreate");
  *s = reinterpret_cast<CUstream>(new Queue(ctx));
  return kSuccess;
}
FAKE_API CUresult cuStreamDestroy_v2(CUstream s) {
  IN_CONTEXT("cuStreamDestroy_v2");
  if (!s || foreignStream(s, ctx)) return kInvalidHandle;
  reinterpret_cast<Queue*>(s)->retire();
  return kSuccess;
}
FAKE_API CUresult cuStreamSynchronize(CUstream s) {
  IN_CONTEXT("cuStreamSynchronize");
  if (foreignStream(s, ctx)) return kInvalidHandle;
  {
    std::lock_guard<std::mutex> lock(S().mu);
    if (!(S().flags[ctx->device] & kCtxSchedBlockingSync)) {
      std::fprintf(stderr,
                   "fake CUDA: cuStreamSynchronize in a context without CU_CTX_SCHED_BLOCKING_SYNC spins a core\n");
      return kNotPermitted;
    }
  }
  const Waiting waiting;
  queueOf(s, ctx).drain();
  return ctx->sticky.load();
}
FAKE_API CUresult cuEventCreate(CUevent* e, unsigned flags) {
  IN_CONTEXT("cuEventCreate");
  *e = reinterpret_cast<CUevent>(new EventBox{ctx, flags});
  return kSuccess;
}
FAKE_API CUresult cuEventDestroy_v2(CUevent e) {
  IN_CONTEXT("cuEventDestroy_v2");
  delete reinterpret_cast<EventBox*>(e);
  return kSuccess;
}
FAKE_API CUresult cuEventRecord(CUevent e, CUstream s) {
  IN_CONTEXT("cuEventRecord");
  auto* box = reinterpret_cast<EventBox*>(e);
  if (box->ctx != ctx || foreignStream(s, ctx)) return kInvalidHandle;
  std::shared_ptr<EventState> state = box->state;
  uint64_t generation;
  {
    std::lock_guard<std::mutex> lock(state->mu);
    generation = ++state->recorded;
  }
  auto complete = [state, generation] {
    std::lock_guard<std::mutex> lock(state->mu);
    if (state->completed < generation) state->completed = generation;
    state->cv.notify_all();
  };
  // Completion is signalled even in a faulted context, so a waiter wakes and sees the fault.
  queueOf(s, ctx).push(complete, true);
  return kSuccess;
}
FAKE_API CUresult cuEventSynchronize(CUevent e) {
  IN_CONTEXT("cuEventSynchronize");
  auto* box = reinterpret_cast<EventBox*>(e);
  if (box->ctx != ctx) return kInvalidHandle;
  if (!(box->flags & kEventBlockingSync)) {
    std::fprintf(stderr, "fake CUDA: cuEventSynchronize on an event without CU_EVENT_BLOCKING_SYNC spins a core\n");
    return kNotPermitted;
  }
  EventState& state = *box->state;
  const Waiting waiting;
  std::unique_lock<std::mutex> lock(state.mu);
  const uint64_t target = state.recorded;
  // Polls for exit too: the driver's teardown wakes every waiter with CUDA_ERROR_DEINITIALIZED.
  while (!state.cv.wait_for(lock, std::chrono::milliseconds(20),
                            [&] { return state.completed >= target || S().deinitialized.load(); })) {
  }
  if (S().deinitialized.load()) return afterExit("cuEventSynchronize (woken by exit)");
  return ctx->sticky.load();
}

// ---- IPC ----

namespace {
struct FakeIpc {
  char magic[16];
  int32_t pid;
  int32_t fd;
  uint64_t blockBytes;
  uint64_t offset;
};
static_assert(sizeof(FakeIpc) <= KVF_CU_IPC_HANDLE_SIZE, "fits a CUipcMemHandle");
}  // namespace

FAKE_API CUresult cuIpcGetMemHandle(CUipcMemHandle* handle, CUdeviceptr base) {
  IN_CONTEXT("cuIpcGetMemHandle");
  std::lock_guard<std::mutex> lock(S().mu);
  auto it = S().allocs.find(base);
  if (it == S().allocs.end() || it->second.kind != Kind::kDevice) return kInvalidValue;
  const Block* b = it->second.block;
  // The handle names the whole underlying block: an importer maps all of it, neighbours included.
  FakeIpc ipc{};
  std::memcpy(ipc.magic, "kvfabric-ipc", 12);
  ipc.pid = getpid();
  ipc.fd = b->fd;
  ipc.blockBytes = b->size;
  ipc.offset = base - reinterpret_cast<uintptr_t>(b->base);
  std::memset(handle->reserved, 0, sizeof(handle->reserved));
  std::memcpy(handle->reserved, &ipc, sizeof(ipc));
  return kSuccess;
}
FAKE_API CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* out, CUipcMemHandle handle, unsigned) {
  IN_CONTEXT("cuIpcOpenMemHandle_v2");
  FakeIpc ipc;
  std::memcpy(&ipc, handle.reserved, sizeof(ipc));
  if (std::memcmp(ipc.magic, "kvfabric-ipc", 12) != 0) return kInvalidValue;
  const std::string path = "/proc/" + std::to_string(ipc.pid) + "/fd/" + std::to_string(ipc.fd);
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return kInvalidValue;
  void* p = mmap(nullptr, ipc.blockBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return kOutOfMemory;
  auto* b = new Block();
  b->base = static_cast<uint8_t*>(p);
  b->size = ipc.blockBytes;
  b->device = ctx->device;
  std::lock_guard<std::mutex> lock(S().mu);
  S().allocs[reinterpret_cast<uintptr_t>(p)] = Alloc{ipc.blockBytes, Kind::kImported, ctx->device, b};
  *out = reinterpret_cast<uintptr_t>(p) + ipc.offset;
  return kSuccess;
}
FAKE_API CUresult cuIpcCloseMemHandle(CUdeviceptr p) {
  IN_CONTEXT("cuIpcCloseMemHandle");
  std::lock_guard<std::mutex> lock(S().mu);
  uintptr_t base = 0;
  const Alloc* a = findLocked(p, 1, &base);
  if (!a || a->kind != Kind::kImported) return kInvalidValue;
  Block* b = a->block;
  S().allocs.erase(base);
  munmap(b->base, b->size);
  delete b;
  return kSuccess;
}

// ---- modules and the kernel ----

namespace {
// A fake image: "PTX" is text with its ISA version and target; a "CUBIN" starts with the ELF magic.
constexpr const char kCubinMagic[] =
    "\x7f"
    "ELF kvfabric-fake-cubin";
int ptxIsaFor(int cudaMajor, int cudaMinor) { return (cudaMajor - 4) * 10 + cudaMinor; }  // 12.4 -> 84, 13.0 -> 90
}  // namespace

FAKE_API CUresult cuModuleLoadData(CUmodule* m, const void* image) {
  IN_CONTEXT("cuModuleLoadData");
  const char* text = static_cast<const char*>(image);
  if (!std::strstr(text, "kvf_move_blocks")) return kInvalidValue;
  int cc = 0;
  std::sscanf(std::strstr(text, "sm_") ? std::strstr(text, "sm_") + 3 : "0", "%d", &cc);
  const int deviceCc = ctx->device == 0 ? 90 : 80;
  if (std::strncmp(text, kCubinMagic, sizeof(kCubinMagic) - 1) == 0) {
    // A CUBIN runs only on its own architecture, and only on a driver at least as new as its toolkit.
    int toolkitMajor = 0;
    if (const char* at = std::strstr(text, "cuda ")) std::sscanf(at + 5, "%d", &toolkitMajor);
    if (cc != deviceCc || toolkitMajor > driverVersion() / 1000) return kNoBinaryForGpu;
  } else {
    int isaMajor = 0, isaMinor = 0;
    if (const char* at = std::strstr(text, ".version ")) std::sscanf(at + 9, "%d.%d", &isaMajor, &isaMinor);
    const int driver = driverVersion();
    if (isaMajor * 10 + isaMinor > ptxIsaFor(driver / 1000, (driver % 1000) / 10)) return kUnsupportedPtxVersion;
    if (cc > deviceCc) return kNoBinaryForGpu;
  }
  uintptr_t memory = 0;
  const CUresult r = deviceAlloc(&memory, kGranule, ctx->device, Kind::kModule);
  if (r != kSuccess) return r;
  *m = reinterpret_cast<CUmodule>(new FakeModule{ctx, memory});
  return kSuccess;
}
FAKE_API CUresult cuModuleUnload(CUmodule m) {
  IN_CONTEXT("cuModuleUnload");
  auto* module = reinterpret_cast<FakeModule*>(m);
  deviceFree(module->memory, Kind::kModule);
  delete module;
  return kSuccess;
}
FAKE_API CUresult cuModuleGetFunction(CUfunction* f, CUmodule m, const char* name) {
  IN_CONTEXT("cuModuleGetFunction");
  const bool sum = std::strcmp(name, "kvf_sum_planes") == 0;
  if (!sum && std::strcmp(name, "kvf_move_blocks") != 0) return kNotFound;
  static std::mutex mu;
  static std::map<std::pair<CUmodule, bool>, FakeFunction*>* functions =
      new std::map<std::pair<CUmodule, bool>, FakeFunction*>();
  std::lock_guard<std::mutex> lock(mu);
  FakeFunction*& fn = (*functions)[{m, sum}];
  if (!fn) fn = new FakeFunction{reinterpret_cast<FakeModule*>(m), sum};
  *f = reinterpret_cast<CUfunction>(fn);
  return kSuccess;
}
namespace {
// kvf_sum_planes(blocks, fills, count, planes, pieceBytes, planeBytes, tables, planeSums): every address
// it will touch checked first, as a GPU would fault on it, then the kernel's own code run thread by thread.
CUresult launchSumPlanes(Ctx* ctx, CUstream s, CUresult inject, unsigned gx, unsigned gy, unsigned bx, void** params) {
  const CUdeviceptr blocks = *static_cast<CUdeviceptr*>(params[0]);
  const CUdeviceptr fills = *static_cast<CUdeviceptr*>(params[1]);
  const unsigned count = *static_cast<unsigned*>(params[2]);
  const unsigned planes = *static_cast<unsigned*>(params[3]);
  const unsigned long long pieceBytes = *static_cast<unsigned long long*>(params[4]);
  const unsigned long long planeBytes = *static_cast<unsigned long long*>(params[5]);
  const CUdeviceptr tables = *static_cast<CUdeviceptr*>(params[6]);
  const CUdeviceptr planeSums = *static_cast<CUdeviceptr*>(params[7]);
  const int device = ctx->device;
  queueOf(s, ctx).push([=] {
    if (isSticky(inject)) {
      ctx->sticky.store(inject);
      return;
    }
    const size_t tableBytes = 12 * 256 * 4;
    if (blocks % 8 || fills % 4 || tables % 4 || planeSums % 4) {
      ctx->sticky.store(kMisalignedAddress);
      return;
    }
    if (!kernelReachable(blocks, size_t{count} * 8, device) || !kernelReachable(fills, size_t{count} * 4, device) ||
        !kernelReachable(tables, tableBytes, device) ||
        !kernelReachable(planeSums, size_t{count} * planes * 4, device)) {
      ctx->sticky.store(kIllegalAddress);
      return;
    }
    const auto* addresses = reinterpret_cast<const uint64_t*>(blocks);
    const auto* filled = reinterpret_cast<const uint32_t*>(fills);
    for (unsigned b = 0; b < count; ++b) {
      if (filled[b] == 0) continue;
      const size_t touched = (planes - 1) * planeBytes + filled[b] * pieceBytes;
      if (!kernelReachable(addresses[b], touched, device)) {
        ctx->sticky.store(kIllegalAddress);
        return;
      }
    }
    // Every thread of the grid, as launched: a grid too small leaves sums unwritten, as on a GPU.
    gridDim = {gx, gy, 1};
    blockDim = {bx, 1, 1};
    for (unsigned y = 0; y < gy; ++y) {
      for (unsigned x = 0; x < gx; ++x) {
        for (unsigned thread = 0; thread < bx; ++thread) {
          blockIdx = {x, y, 0};
          threadIdx = {thread, 0, 0};
          kvf_sum_planes(reinterpret_cast<const kvf_u64*>(blocks), filled, count, planes, pieceBytes, planeBytes,
                         reinterpret_cast<const kvf_u32*>(tables), reinterpret_cast<kvf_u32*>(planeSums));
        }
      }
    }
  });
  return kSuccess;
}
}  // namespace

// kvf_move_blocks(table, count, vecs): the kernel's contract, checked as a GPU would fault: a bad or
// misaligned address takes the whole context down with a sticky error.
FAKE_API CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                 unsigned bz, unsigned, CUstream s, void** params, void** extra) {
  if (S().deinitialized.load()) return afterExit("cuLaunchKernel");
  if (!S().initialized) return kNotInitialized;
  const CUresult inject = injected("cuLaunchKernel");
  if (inject != kSuccess && !isSticky(inject)) return inject;
  Ctx* ctx = current();
  if (!ctx) return kInvalidContext;
  if (CUresult sticky = ctx->sticky.load(); sticky != kSuccess) return sticky;
  if (isSticky(inject) && t_injectedAtCall) {  // the context was already poisoned (by another user of it)
    ctx->sticky.store(inject);
    return inject;
  }
  auto* fn = reinterpret_cast<FakeFunction*>(f);
  if (!fn || extra || !params || foreignStream(s, ctx)) return kInvalidValue;
  if (fn->module->ctx != ctx) return kInvalidContext;
  if (gx == 0 || gy == 0 || gz != 1 || bx == 0 || bx > 1024 || by != 1 || bz != 1 || gy > 65535) return kInvalidValue;
  if (fn->sum) return launchSumPlanes(ctx, s, inject, gx, gy, bx, params);
  const CUdeviceptr table = *static_cast<CUdeviceptr*>(params[0]);
  const unsigned count = *static_cast<unsigned*>(params[1]);
  const unsigned long long vecs = *static_cast<unsigned long long*>(params[2]);
  if (isPinned(table, 1)) ++S().kernelHostTables;  // every thread would read it over PCIe
  const int device = ctx->device;
  const bool flip = flipsUpload(vecs * 16);
  queueOf(s, ctx).push([=] {
    if (isSticky(inject)) {
      ctx->sticky.store(inject);
      return;
    }
    if (!kernelReachable(table, size_t{count} * 16, device)) {
      ctx->sticky.store(kIllegalAddress);
      return;
    }
    const auto* pairs = reinterpret_cast<const uint64_t*>(table);
    for (unsigned b = 0; b < count; ++b) {
      const size_t bytes = vecs * 16;
      if (pairs[2 * b] % 16 || pairs[2 * b + 1] % 16) {
        ctx->sticky.store(kMisalignedAddress);
        return;
      }
      if (!kernelReachable(pairs[2 * b], bytes, device) || !kernelReachable(pairs[2 * b + 1], bytes, device)) {
        ctx->sticky.store(kIllegalAddress);
        return;
      }
      std::memcpy(reinterpret_cast<void*>(pairs[2 * b + 1]), reinterpret_cast<const void*>(pairs[2 * b]), bytes);
      if (flip && !isPinned(pairs[2 * b + 1], bytes)) flipLastByte(pairs[2 * b + 1], bytes);
    }
  });
  return kSuccess;
}

// ---- NVRTC ----

namespace {
struct FakeProgram {
  std::string source;
  std::string arch;  // "compute_90" or "sm_90"
};
void nvrtcVersionOf(int* major, int* minor) {
  const char* v = std::getenv("KVFABRIC_FAKECUDA_NVRTC_VERSION");
  if (v && *v && std::sscanf(v, "%d.%d", major, minor) == 2) return;
  *major = driverVersion() / 1000;
  *minor = (driverVersion() % 1000) / 10;
}
}  // namespace

FAKE_API nvrtcResult nvrtcVersion(int* major, int* minor) {
  nvrtcVersionOf(major, minor);
  return 0;
}
FAKE_API nvrtcResult nvrtcCreateProgram(nvrtcProgram* p, const char* src, const char*, int, const char* const*,
                                        const char* const*) {
  *p = reinterpret_cast<nvrtcProgram>(new FakeProgram{src, ""});
  return 0;
}
FAKE_API nvrtcResult nvrtcCompileProgram(nvrtcProgram p, int n, const char* const* options) {
  auto* prog = reinterpret_cast<FakeProgram*>(p);
  for (int i = 0; i < n; ++i) {
    const char* prefix = "--gpu-architecture=";
    if (std::strncmp(options[i], prefix, std::strlen(prefix)) == 0) prog->arch = options[i] + std::strlen(prefix);
  }
  return prog->arch.empty() ? 3 : 0;  // NVRTC_ERROR_INVALID_INPUT without a target
}
FAKE_API nvrtcResult nvrtcGetPTXSize(nvrtcProgram p, size_t* size);
FAKE_API nvrtcResult nvrtcGetPTX(nvrtcProgram p, char* out);
namespace {
std::string imageOf(const FakeProgram& prog, bool cubin) {
  int major = 0, minor = 0;
  nvrtcVersionOf(&major, &minor);
  const std::string cc = prog.arch.substr(prog.arch.find('_') + 1);
  if (cubin) return std::string(kCubinMagic) + " sm_" + cc + " cuda " + std::to_string(major) + "\n" + prog.source;
  const int isa = ptxIsaFor(major, minor);
  return ".version " + std::to_string(isa / 10) + "." + std::to_string(isa % 10) + "\n.target sm_" + cc + "\n" +
         prog.source;
}
}  // namespace
FAKE_API nvrtcResult nvrtcGetPTXSize(nvrtcProgram p, size_t* size) {
  *size = imageOf(*reinterpret_cast<FakeProgram*>(p), false).size() + 1;
  return 0;
}
FAKE_API nvrtcResult nvrtcGetPTX(nvrtcProgram p, char* out) {
  const std::string s = imageOf(*reinterpret_cast<FakeProgram*>(p), false);
  std::memcpy(out, s.c_str(), s.size() + 1);
  return 0;
}
FAKE_API nvrtcResult nvrtcGetCUBINSize(nvrtcProgram p, size_t* size) {
  auto* prog = reinterpret_cast<FakeProgram*>(p);
  if (prog->arch.rfind("sm_", 0) != 0) return 3;  // a compute_ target makes no CUBIN
  *size = imageOf(*prog, true).size() + 1;
  return 0;
}
FAKE_API nvrtcResult nvrtcGetCUBIN(nvrtcProgram p, char* out) {
  auto* prog = reinterpret_cast<FakeProgram*>(p);
  if (prog->arch.rfind("sm_", 0) != 0) return 3;
  const std::string s = imageOf(*prog, true);
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
