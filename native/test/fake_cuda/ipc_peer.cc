// Test-only second process for the IPC test: maps a CUDA IPC handle through a driver library (the
// stand-in, or a real libcuda) the way another process on the same GPU would, and writes every byte
// the mapping exposes (the whole underlying allocation, as cuMemGetAddressRange reports it) to a file.
//   kvfabric_fakecuda_ipc_peer <driver .so> <handle as 128 hex digits> <output file>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cuda_driver.h"

namespace {

template <typename Fn>
Fn symbol(void* lib, const char* name) {
  auto fn = reinterpret_cast<Fn>(dlsym(lib, name));
  if (!fn) {
    std::fprintf(stderr, "ipc peer: %s missing\n", name);
    std::exit(2);
  }
  return fn;
}

void ok(CUresult r, const char* call) {
  if (r != 0) {
    std::fprintf(stderr, "ipc peer: %s failed with %d\n", call, r);
    std::exit(3);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4 || std::strlen(argv[2]) != 2 * KVF_CU_IPC_HANDLE_SIZE) {
    std::fprintf(stderr, "usage: %s <driver .so> <handle hex> <output file>\n", argv[0]);
    return 1;
  }
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    std::fprintf(stderr, "ipc peer: %s\n", dlerror());
    return 2;
  }
  CUipcMemHandle handle;
  for (int i = 0; i < KVF_CU_IPC_HANDLE_SIZE; ++i) {
    unsigned byte = 0;
    std::sscanf(argv[2] + 2 * i, "%2x", &byte);
    handle.reserved[i] = static_cast<char>(byte);
  }
  ok(symbol<CUresult (*)(unsigned)>(lib, "cuInit")(0), "cuInit");
  CUcontext ctx = nullptr;
  ok(symbol<CUresult (*)(CUcontext*, CUdevice)>(lib, "cuDevicePrimaryCtxRetain")(&ctx, 0), "cuDevicePrimaryCtxRetain");
  ok(symbol<CUresult (*)(CUcontext)>(lib, "cuCtxPushCurrent_v2")(ctx), "cuCtxPushCurrent_v2");
  CUdeviceptr mapped = 0;
  ok(symbol<CUresult (*)(CUdeviceptr*, CUipcMemHandle, unsigned)>(lib, "cuIpcOpenMemHandle_v2")(&mapped, handle, 1),
     "cuIpcOpenMemHandle_v2");
  CUdeviceptr base = 0;
  size_t size = 0;
  ok(symbol<CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr)>(lib, "cuMemGetAddressRange_v2")(&base, &size, mapped),
     "cuMemGetAddressRange_v2");
  std::vector<char> bytes(size);
  ok(symbol<CUresult (*)(void*, CUdeviceptr, size_t, CUstream)>(lib, "cuMemcpyDtoHAsync_v2")(bytes.data(), base, size,
                                                                                             nullptr),
     "cuMemcpyDtoHAsync_v2");  // pageable destination: returns once the bytes are there
  FILE* out = std::fopen(argv[3], "wb");
  if (!out || std::fwrite(bytes.data(), 1, size, out) != size) return 4;
  std::fclose(out);
  std::printf("{\"mappedAt\":%llu,\"base\":%llu,\"bytes\":%zu}\n", static_cast<unsigned long long>(mapped),
              static_cast<unsigned long long>(base), size);
  symbol<CUresult (*)(CUdeviceptr)>(lib, "cuIpcCloseMemHandle")(mapped);
  return 0;
}
