// The CUDA driver API as kvfabric uses it: hand-declared types (so no CUDA toolkit is needed to build)
// and one function table filled with dlopen/dlsym at run time, so one build runs with or without a GPU.
// The declarations follow cuda.h; only what the backend calls is here. The same header declares the
// few NVRTC entry points used to compile the gather/scatter kernel when libnvrtc is present.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "status.h"

extern "C" {
typedef int CUresult;  // an enum in cuda.h; 0 is CUDA_SUCCESS
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st* CUcontext;
typedef struct CUstream_st* CUstream;
typedef struct CUevent_st* CUevent;
typedef struct CUmod_st* CUmodule;
typedef struct CUfunc_st* CUfunction;
typedef struct CUarray_st* CUarray;
typedef int CUdevice_attribute;
typedef int CUmemorytype;

#define KVF_CU_IPC_HANDLE_SIZE 64
typedef struct CUipcMemHandle_st {
  char reserved[KVF_CU_IPC_HANDLE_SIZE];
} CUipcMemHandle;

// cuda.h's CUDA_MEMCPY2D (v2), field for field.
typedef struct CUDA_MEMCPY2D_st {
  size_t srcXInBytes;
  size_t srcY;
  CUmemorytype srcMemoryType;
  const void* srcHost;
  CUdeviceptr srcDevice;
  CUarray srcArray;
  size_t srcPitch;
  size_t dstXInBytes;
  size_t dstY;
  CUmemorytype dstMemoryType;
  void* dstHost;
  CUdeviceptr dstDevice;
  CUarray dstArray;
  size_t dstPitch;
  size_t WidthInBytes;
  size_t Height;
} CUDA_MEMCPY2D;

typedef int nvrtcResult;  // 0 is NVRTC_SUCCESS
typedef struct _nvrtcProgram* nvrtcProgram;
}

namespace kvfabric::cuda {

// Values from cuda.h.
constexpr CUresult kSuccess = 0;
constexpr CUresult kErrorNotReady = 600;
constexpr unsigned kMemHostAllocPortable = 0x01;
constexpr unsigned kMemHostAllocDeviceMap = 0x02;
constexpr unsigned kStreamNonBlocking = 0x1;
constexpr unsigned kEventBlockingSync = 0x1;  // the waiting thread sleeps instead of spinning a core
constexpr unsigned kEventDisableTiming = 0x2;
constexpr unsigned kCtxSchedBlockingSync = 0x4;
constexpr CUmemorytype kMemoryTypeHost = 1;
constexpr CUmemorytype kMemoryTypeDevice = 2;
constexpr CUdevice_attribute kAttrCanMapHostMemory = 19;
constexpr CUdevice_attribute kAttrUnifiedAddressing = 41;
constexpr CUdevice_attribute kAttrComputeCapabilityMajor = 75;
constexpr CUdevice_attribute kAttrComputeCapabilityMinor = 76;

// One entry per driver function; the name in the comment is the symbol looked up.
struct DriverApi {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDriverGetVersion)(int*);
  CUresult (*cuGetErrorName)(CUresult, const char**);
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDeviceGetName)(char*, int, CUdevice);
  CUresult (*cuDeviceGetAttribute)(int*, CUdevice_attribute, CUdevice);
  CUresult (*cuDeviceTotalMem)(size_t*, CUdevice);                   // cuDeviceTotalMem_v2
  CUresult (*cuDevicePrimaryCtxGetState)(CUdevice, unsigned*, int*);  // no _v2
  CUresult (*cuDevicePrimaryCtxSetFlags)(CUdevice, unsigned);        // cuDevicePrimaryCtxSetFlags_v2
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);        // no _v2
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);                   // cuDevicePrimaryCtxRelease_v2
  CUresult (*cuCtxPushCurrent)(CUcontext);                           // cuCtxPushCurrent_v2
  CUresult (*cuCtxPopCurrent)(CUcontext*);                           // cuCtxPopCurrent_v2
  CUresult (*cuMemGetInfo)(size_t*, size_t*);                        // cuMemGetInfo_v2
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t);                      // cuMemAlloc_v2
  CUresult (*cuMemFree)(CUdeviceptr);                                // cuMemFree_v2
  CUresult (*cuMemHostAlloc)(void**, size_t, unsigned);
  CUresult (*cuMemFreeHost)(void*);
  CUresult (*cuMemHostGetDevicePointer)(CUdeviceptr*, void*, unsigned);  // cuMemHostGetDevicePointer_v2
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void*, size_t, CUstream);       // _v2
  CUresult (*cuMemcpyDtoHAsync)(void*, CUdeviceptr, size_t, CUstream);             // _v2
  CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);       // _v2
  CUresult (*cuMemcpy2DAsync)(const CUDA_MEMCPY2D*, CUstream);                     // _v2
  CUresult (*cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
  CUresult (*cuStreamCreate)(CUstream*, unsigned);
  CUresult (*cuStreamDestroy)(CUstream);                             // cuStreamDestroy_v2
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuEventCreate)(CUevent*, unsigned);
  CUresult (*cuEventDestroy)(CUevent);                               // cuEventDestroy_v2
  CUresult (*cuEventRecord)(CUevent, CUstream);
  CUresult (*cuEventSynchronize)(CUevent);
  // Optional (null when the driver lacks them): IPC export and the kernel way.
  CUresult (*cuIpcGetMemHandle)(CUipcMemHandle*, CUdeviceptr);
  CUresult (*cuModuleLoadData)(CUmodule*, const void*);
  CUresult (*cuModuleUnload)(CUmodule);
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                             void**, void**);
};

struct NvrtcApi {
  nvrtcResult (*nvrtcCreateProgram)(nvrtcProgram*, const char*, const char*, int, const char* const*,
                                    const char* const*);
  nvrtcResult (*nvrtcCompileProgram)(nvrtcProgram, int, const char* const*);
  nvrtcResult (*nvrtcGetPTXSize)(nvrtcProgram, size_t*);
  nvrtcResult (*nvrtcGetPTX)(nvrtcProgram, char*);
  nvrtcResult (*nvrtcGetProgramLogSize)(nvrtcProgram, size_t*);
  nvrtcResult (*nvrtcGetProgramLog)(nvrtcProgram, char*);
  nvrtcResult (*nvrtcDestroyProgram)(nvrtcProgram*);
  nvrtcResult (*nvrtcVersion)(int*, int*);
  // Optional (NVRTC 11.1 and later): a CUBIN for one architecture, loaded without the driver's JIT.
  nvrtcResult (*nvrtcGetCUBINSize)(nvrtcProgram, size_t*);
  nvrtcResult (*nvrtcGetCUBIN)(nvrtcProgram, char*);
};

struct LoadedNvrtcInfo {
  const NvrtcApi* api = nullptr;
  int major = 0, minor = 0;  // nvrtcVersion
  std::string library;       // the file that was loaded
};

// The driver, loaded once per process (KVFABRIC_LIBCUDA overrides "libcuda.so.1") and cuInit'ed.
// Never unloaded: the driver keeps threads and state that outlive any pool. Returns kUnavailable with
// the reason (library not found, a symbol missing, cuInit failed with CUDA_ERROR_X).
Status loadDriver(const DriverApi** out);
// The driver's CUDA version as cuDriverGetVersion reports it (13000 for 13.0).
int driverVersion();
// NVRTC, loaded once: KVFABRIC_LIBNVRTC, else the library of the driver's CUDA major version first, then
// older ones. An NVRTC newer than the driver is refused: what it emits may not load (its PTX ISA is
// newer than the driver's JIT knows). kUnavailable when none fits.
Status loadNvrtc(const LoadedNvrtcInfo** out);

// "cuMemAlloc_v2 failed with CUDA_ERROR_OUT_OF_MEMORY (2)" as a Status; ok for CUDA_SUCCESS. A sticky
// error (the context is unusable for the rest of the process) marks the device of the calling thread's
// ContextScope lost and says to restart the process (cuda_context.h).
Status check(CUresult result, const char* call, Code code = Code::kUnavailable);
std::string errorName(CUresult result);

}  // namespace kvfabric::cuda
