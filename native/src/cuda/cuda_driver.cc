// Loads libcuda (and, when asked, libnvrtc) with dlopen and fills the function tables of cuda_driver.h.
#include "cuda_driver.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <vector>

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
  bind(lib, "cuGetErrorName", &a.cuGetErrorName, &missing);
  bind(lib, "cuDeviceGetCount", &a.cuDeviceGetCount, &missing);
  bind(lib, "cuDeviceGet", &a.cuDeviceGet, &missing);
  bind(lib, "cuDeviceGetName", &a.cuDeviceGetName, &missing);
  bind(lib, "cuDeviceGetAttribute", &a.cuDeviceGetAttribute, &missing);
  bind(lib, "cuDeviceTotalMem_v2", &a.cuDeviceTotalMem, &missing);
  bind(lib, "cuDevicePrimaryCtxRetain", &a.cuDevicePrimaryCtxRetain, &missing);
  bind(lib, "cuDevicePrimaryCtxRelease_v2", &a.cuDevicePrimaryCtxRelease, &missing);
  bind(lib, "cuCtxSetCurrent", &a.cuCtxSetCurrent, &missing);
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
  }
  return l;
}

const Loaded& driver() {
  static const Loaded loaded = loadDriverOnce();  // thread-safe, once per process
  return loaded;
}

struct LoadedNvrtc {
  Status status;
  NvrtcApi api{};
};

LoadedNvrtc loadNvrtcOnce() {
  LoadedNvrtc l;
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("KVFABRIC_LIBNVRTC"); env && *env) {
    candidates.push_back(env);
  } else {
    for (const char* name : {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12",
                             "/usr/local/cuda/targets/x86_64-linux/lib/libnvrtc.so.13",
                             "/usr/local/cuda/targets/x86_64-linux/lib/libnvrtc.so.12", "/usr/local/cuda/lib64/libnvrtc.so"}) {
      candidates.push_back(name);
    }
  }
  void* lib = nullptr;
  std::string tried;
  for (const std::string& c : candidates) {
    lib = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib) break;
    tried += (tried.empty() ? "" : ", ") + c;
  }
  if (!lib) {
    l.status = Status(Code::kUnavailable, "NVRTC not found (tried " + tried + ")");
    return l;
  }
  NvrtcApi& a = l.api;
  std::string missing;
  bind(lib, "nvrtcCreateProgram", &a.nvrtcCreateProgram, &missing);
  bind(lib, "nvrtcCompileProgram", &a.nvrtcCompileProgram, &missing);
  bind(lib, "nvrtcGetPTXSize", &a.nvrtcGetPTXSize, &missing);
  bind(lib, "nvrtcGetPTX", &a.nvrtcGetPTX, &missing);
  bind(lib, "nvrtcGetProgramLogSize", &a.nvrtcGetProgramLogSize, &missing);
  bind(lib, "nvrtcGetProgramLog", &a.nvrtcGetProgramLog, &missing);
  bind(lib, "nvrtcDestroyProgram", &a.nvrtcDestroyProgram, &missing);
  if (!missing.empty()) l.status = Status(Code::kUnavailable, "NVRTC lacks " + missing);
  return l;
}

}  // namespace

Status loadDriver(const DriverApi** out) {
  const Loaded& l = driver();
  if (!l.status.isOk()) return l.status;
  *out = &l.api;
  return Status::ok();
}

Status loadNvrtc(const NvrtcApi** out) {
  static const LoadedNvrtc loaded = loadNvrtcOnce();
  if (!loaded.status.isOk()) return loaded.status;
  *out = &loaded.api;
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
  return Status(code, std::string(call) + " failed with " + errorName(result));
}

}  // namespace kvfabric::cuda
