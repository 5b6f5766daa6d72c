// Loads libcuda (and, when asked, libnvrtc) with dlopen and fills the function tables of cuda_driver.h.
#include "cuda_driver.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "cuda_context.h"

namespace kvfabric::cuda {
namespace {

constexpr CUresult kErrorOutOfMemory = 2;

struct Loaded {
  Status status;
  DriverApi api{};
};

template <typename Fn>
bool bind(void* lib, const char* symbol, Fn* slot, std::string* missing) {
  *slot = reinterpret_cast<Fn>(dlsym(lib, symbol));
  if (!*slot) {
    if (!missing->empty()) *missing += ", ";
    *missing += symbol;
  }
  return *slot != nullptr;
}

Loaded loadDriverOnce() {
  Loaded l;
  const char* override = std::getenv("KVFABRIC_LIBCUDA");
  const char* file = override && *override ? override : "libcuda.so.1";
  void* lib = dlopen(file, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = dlerror();
    l.status = Status(Code::kUnavailable, std::string("CUDA driver library ") + file + " not found (" +
                                              (why ? why : "dlopen failed") + ")");
    return l;
  }
  DriverApi& a = l.api;
  std::string missing;
  bind(lib, "cuInit", &a.cuInit, &missing);
  bind(lib, "cuDriverGetVersion", &a.cuDriverGetVersion, &missing);
  bind(lib, "cuGetErrorName", &a.cuGetErrorName, &missing);
  bind(lib, "cuDeviceGetCount", &a.cuDeviceGetCount, &missing);
  bind(lib, "cuDeviceGet", &a.cuDeviceGet, &missing);
  bind(lib, "cuDeviceGetName", &a.cuDeviceGetName, &missing);
  bind(lib, "cuDeviceGetAttribute", &a.cuDeviceGetAttribute, &missing);
  bind(lib, "cuDeviceTotalMem_v2", &a.cuDeviceTotalMem, &missing);
  bind(lib, "cuDevicePrimaryCtxGetState", &a.cuDevicePrimaryCtxGetState, &missing);
  bind(lib, "cuDevicePrimaryCtxSetFlags_v2", &a.cuDevicePrimaryCtxSetFlags, &missing);
  bind(lib, "cuDevicePrimaryCtxRetain", &a.cuDevicePrimaryCtxRetain, &missing);
  bind(lib, "cuDevicePrimaryCtxRelease_v2", &a.cuDevicePrimaryCtxRelease, &missing);
  bind(lib, "cuCtxPushCurrent_v2", &a.cuCtxPushCurrent, &missing);
  bind(lib, "cuCtxPopCurrent_v2", &a.cuCtxPopCurrent, &missing);
  bind(lib, "cuMemGetInfo_v2", &a.cuMemGetInfo, &missing);
  bind(lib, "cuMemAlloc_v2", &a.cuMemAlloc, &missing);
  bind(lib, "cuMemFree_v2", &a.cuMemFree, &missing);
  bind(lib, "cuMemHostAlloc", &a.cuMemHostAlloc, &missing);
  bind(lib, "cuMemFreeHost", &a.cuMemFreeHost, &missing);
  bind(lib, "cuMemHostGetDevicePointer_v2", &a.cuMemHostGetDevicePointer, &missing);
  bind(lib, "cuMemcpyHtoDAsync_v2", &a.cuMemcpyHtoDAsync, &missing);
  bind(lib, "cuMemcpyDtoHAsync_v2", &a.cuMemcpyDtoHAsync, &missing);
  bind(lib, "cuMemcpyDtoDAsync_v2", &a.cuMemcpyDtoDAsync, &missing);
  bind(lib, "cuMemcpy2DAsync_v2", &a.cuMemcpy2DAsync, &missing);
  bind(lib, "cuMemsetD8Async", &a.cuMemsetD8Async, &missing);
  bind(lib, "cuStreamCreate", &a.cuStreamCreate, &missing);
  bind(lib, "cuStreamDestroy_v2", &a.cuStreamDestroy, &missing);
  bind(lib, "cuStreamSynchronize", &a.cuStreamSynchronize, &missing);
  bind(lib, "cuEventCreate", &a.cuEventCreate, &missing);
  bind(lib, "cuEventDestroy_v2", &a.cuEventDestroy, &missing);
  bind(lib, "cuEventRecord", &a.cuEventRecord, &missing);
  bind(lib, "cuEventSynchronize", &a.cuEventSynchronize, &missing);
  // Optional: without them only IPC export or the kernel way is missing, and each says so when used.
  std::string optional;
  bind(lib, "cuIpcGetMemHandle", &a.cuIpcGetMemHandle, &optional);
  bind(lib, "cuModuleLoadData", &a.cuModuleLoadData, &optional);
  bind(lib, "cuModuleUnload", &a.cuModuleUnload, &optional);
  bind(lib, "cuModuleGetFunction", &a.cuModuleGetFunction, &optional);
  bind(lib, "cuLaunchKernel", &a.cuLaunchKernel, &optional);
  if (!missing.empty()) {
    l.status = Status(Code::kUnavailable, std::string("CUDA driver ") + file + " lacks " + missing);
    return l;  // the library stays loaded: harmless, and dlclose of a driver is not worth the risk
  }
  const CUresult init = a.cuInit(0);
  if (init != kSuccess) {
    const char* name = nullptr;
    a.cuGetErrorName(init, &name);
    l.status = Status(Code::kUnavailable, std::string("cuInit failed with ") + (name ? name : "an unknown error") +
                                              " (" + std::to_string(init) + ")");
    return l;
  }
  // Registered after the driver loaded, so it runs before the driver's own teardown at exit.
  installExitHook();
  return l;
}

const Loaded& driver() {
  static const Loaded loaded = loadDriverOnce();  // thread-safe, once per process
  return loaded;
}

struct LoadedNvrtc {
  Status status;
  NvrtcApi api{};
  LoadedNvrtcInfo info;
};

// Binds one candidate; kUnavailable (with why) when it is missing, incomplete or newer than the driver.
Status tryNvrtc(const std::string& file, int driverMajor, LoadedNvrtc* l) {
  void* lib = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) return Status(Code::kUnavailable, file + " not found");
  NvrtcApi a{};
  std::string missing;
  bind(lib, "nvrtcCreateProgram", &a.nvrtcCreateProgram, &missing);
  bind(lib, "nvrtcCompileProgram", &a.nvrtcCompileProgram, &missing);
  bind(lib, "nvrtcGetPTXSize", &a.nvrtcGetPTXSize, &missing);
  bind(lib, "nvrtcGetPTX", &a.nvrtcGetPTX, &missing);
  bind(lib, "nvrtcGetProgramLogSize", &a.nvrtcGetProgramLogSize, &missing);
  bind(lib, "nvrtcGetProgramLog", &a.nvrtcGetProgramLog, &missing);
  bind(lib, "nvrtcDestroyProgram", &a.nvrtcDestroyProgram, &missing);
  bind(lib, "nvrtcVersion", &a.nvrtcVersion, &missing);
  std::string optional;
  bind(lib, "nvrtcGetCUBINSize", &a.nvrtcGetCUBINSize, &optional);
  bind(lib, "nvrtcGetCUBIN", &a.nvrtcGetCUBIN, &optional);
  if (!missing.empty()) return Status(Code::kUnavailable, file + " lacks " + missing);
  int major = 0, minor = 0;
  if (a.nvrtcVersion(&major, &minor) != 0) return Status(Code::kUnavailable, file + ": nvrtcVersion failed");
  if (driverMajor > 0 && major > driverMajor) {
    return Status(Code::kUnavailable, file + " is NVRTC " + std::to_string(major) + "." + std::to_string(minor) +
                                          ", newer than the driver's CUDA " + std::to_string(driverMajor));
  }
  l->api = a;
  l->info.major = major;
  l->info.minor = minor;
  l->info.library = file;
  return Status::ok();
}

LoadedNvrtc loadNvrtcOnce() {
  LoadedNvrtc l;
  const int driverMajor = driverVersion() / 1000;
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("KVFABRIC_LIBNVRTC"); env && *env) {
    candidates.push_back(env);
  } else {
    // The driver's own major version first, then older ones (CUDA minor-version compatibility holds
    // within a major version); the unversioned name last, since it may be any version.
    for (int major = driverMajor > 0 ? driverMajor : 13; major >= 11; --major) {
      const std::string so = "libnvrtc.so." + std::to_string(major);
      candidates.push_back(so);
      candidates.push_back("/usr/local/cuda/targets/x86_64-linux/lib/" + so);
      candidates.push_back("/usr/local/cuda/lib64/" + so);
    }
    candidates.push_back("libnvrtc.so");
  }
  std::string why;
  for (const std::string& c : candidates) {
    const Status st = tryNvrtc(c, driverMajor, &l);
    if (st.isOk()) return l;
    why += (why.empty() ? "" : "; ") + st.message();
  }
  l.status = Status(Code::kUnavailable, "no usable NVRTC (" + why + ")");
  return l;
}

}  // namespace

Status loadDriver(const DriverApi** out) {
  const Loaded& l = driver();
  if (!l.status.isOk()) return l.status;
  *out = &l.api;
  return Status::ok();
}

int driverVersion() {
  const Loaded& l = driver();
  int version = 0;
  if (l.status.isOk() && l.api.cuDriverGetVersion(&version) != kSuccess) version = 0;
  return version;
}

Status loadNvrtc(const LoadedNvrtcInfo** out) {
  static const LoadedNvrtc* loaded = [] {
    auto* l = new LoadedNvrtc(loadNvrtcOnce());  // info.api points into it: never moves, never freed
    l->info.api = &l->api;
    return l;
  }();
  if (!loaded->status.isOk()) return loaded->status;
  *out = &loaded->info;
  return Status::ok();
}

std::string errorName(CUresult result) {
  const char* name = nullptr;
  const Loaded& l = driver();
  if (l.api.cuGetErrorName) l.api.cuGetErrorName(result, &name);
  return std::string(name ? name : "CUDA_ERROR_UNKNOWN") + " (" + std::to_string(result) + ")";
}

Status check(CUresult result, const char* call, Code code) {
  if (result == kSuccess) return Status::ok();
  if (result == kErrorOutOfMemory) code = Code::kOutOfMemory;
  Status st(code, std::string(call) + " failed with " + errorName(result));
  return isStickyError(result) ? markScopeDeviceLost(st) : st;
}

}  // namespace kvfabric::cuda
