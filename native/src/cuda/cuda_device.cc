// CudaDevice (per-process device state and the NVRTC-compiled block-move kernel) and the RAII handles.
#include "cuda_device.h"

#include <map>
#include <memory>
#include <vector>

namespace kvfabric::cuda {
namespace {

// Copies `count` whole blocks, each `vecs` 16-byte vectors long, between the addresses of a table of
// (source, destination) pairs. Either side may be device memory or mapped pinned host memory, so one
// launch moves every scattered block of a lease over PCIe in both the offload and restore directions.
// blockIdx.y walks the blocks, blockIdx.x and the threads split one block.
constexpr const char* kMoveKernelSource = R"(
struct alignas(16) Vec16 { unsigned long long lo, hi; };
extern "C" __global__ void kvf_move_blocks(const unsigned long long* table, unsigned int count,
                                           unsigned long long vecs) {
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned int b = blockIdx.y; b < count; b += gridDim.y) {
    const Vec16* src = reinterpret_cast<const Vec16*>(table[2 * b]);
    Vec16* dst = reinterpret_cast<Vec16*>(table[2 * b + 1]);
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < vecs; i += stride) {
      dst[i] = src[i];
    }
  }
}
)";

Status nvrtcFailed(const char* call, nvrtcResult r) {
  return Status(Code::kUnavailable, std::string(call) + " failed with NVRTC error " + std::to_string(r));
}

// PTX for compute_<major><minor>; the driver JIT-compiles it when the module is loaded.
Status compilePtx(int major, int minor, std::string* ptx) {
  const NvrtcApi* rtc = nullptr;
  Status st = loadNvrtc(&rtc);
  if (!st.isOk()) return st;
  nvrtcProgram prog = nullptr;
  nvrtcResult r = rtc->nvrtcCreateProgram(&prog, kMoveKernelSource, "kvf_move_blocks.cu", 0, nullptr, nullptr);
  if (r != 0) return nvrtcFailed("nvrtcCreateProgram", r);
  const std::string arch = "--gpu-architecture=compute_" + std::to_string(major) + std::to_string(minor);
  const char* options[] = {arch.c_str()};
  r = rtc->nvrtcCompileProgram(prog, 1, options);
  if (r != 0) {
    size_t logSize = 0;
    std::string log;
    if (rtc->nvrtcGetProgramLogSize(prog, &logSize) == 0 && logSize > 1) {
      log.resize(logSize);
      if (rtc->nvrtcGetProgramLog(prog, &log[0]) != 0) log.clear();
    }
    rtc->nvrtcDestroyProgram(&prog);
    return Status(Code::kUnavailable, "nvrtcCompileProgram failed (" + std::to_string(r) + "): " + log);
  }
  size_t size = 0;
  r = rtc->nvrtcGetPTXSize(prog, &size);
  if (r == 0) {
    ptx->resize(size);
    r = rtc->nvrtcGetPTX(prog, &(*ptx)[0]);
  }
  rtc->nvrtcDestroyProgram(&prog);
  return r == 0 ? Status::ok() : nvrtcFailed("nvrtcGetPTX", r);
}

}  // namespace

Status CudaDevice::get(int index, const CudaDevice** out) {
  const DriverApi* api = nullptr;
  Status st = loadDriver(&api);
  if (!st.isOk()) return st;
  static std::mutex mu;
  static std::map<int, std::unique_ptr<CudaDevice>>* devices = new std::map<int, std::unique_ptr<CudaDevice>>();
  std::lock_guard<std::mutex> lock(mu);
  auto it = devices->find(index);
  if (it == devices->end()) {
    std::unique_ptr<CudaDevice> device(new CudaDevice());
    st = device->open(api, index);
    if (!st.isOk()) return st;  // not cached: a later call may find the device usable
    it = devices->emplace(index, std::move(device)).first;
  }
  *out = it->second.get();
  return Status::ok();
}

Status CudaDevice::open(const DriverApi* api, int index) {
  api_ = api;
  index_ = index;
  int count = 0;
  Status st = check(api->cuDeviceGetCount(&count), "cuDeviceGetCount");
  if (!st.isOk()) return st;
  if (index < 0 || index >= count) {
    return Status(Code::kUnavailable, "no CUDA device index " + std::to_string(index) + " (" + std::to_string(count) +
                                          " device" + (count == 1 ? "" : "s") + ")");
  }
  st = check(api->cuDeviceGet(&device_, index), "cuDeviceGet");
  if (!st.isOk()) return st;
  char name[256] = {0};
  st = check(api->cuDeviceGetName(name, sizeof(name) - 1, device_), "cuDeviceGetName");
  if (!st.isOk()) return st;
  name_ = name;
  size_t total = 0;
  st = check(api->cuDeviceTotalMem(&total, device_), "cuDeviceTotalMem_v2");
  if (!st.isOk()) return st;
  totalBytes_ = total;
  int mapHost = 0, unified = 0;
  if ((st = check(api->cuDeviceGetAttribute(&major_, kAttrComputeCapabilityMajor, device_), "cuDeviceGetAttribute")).isOk() &&
      (st = check(api->cuDeviceGetAttribute(&minor_, kAttrComputeCapabilityMinor, device_), "cuDeviceGetAttribute")).isOk() &&
      (st = check(api->cuDeviceGetAttribute(&mapHost, kAttrCanMapHostMemory, device_), "cuDeviceGetAttribute")).isOk()) {
    st = check(api->cuDeviceGetAttribute(&unified, kAttrUnifiedAddressing, device_), "cuDeviceGetAttribute");
  }
  if (!st.isOk()) return st;
  if (!mapHost || !unified) {
    return Status(Code::kUnavailable, "CUDA device " + std::to_string(index) + " (" + name_ +
                                          ") cannot map host memory or lacks unified addressing");
  }
  // Retained for the life of the process: pools come and go, the context and its module stay valid.
  st = check(api->cuDevicePrimaryCtxRetain(&context_, device_), "cuDevicePrimaryCtxRetain");
  if (!st.isOk()) return st;
  return makeCurrent();
}

Status CudaDevice::makeCurrent() const { return check(api_->cuCtxSetCurrent(context_), "cuCtxSetCurrent"); }

Status CudaDevice::memoryInfo(uint64_t* freeBytes, uint64_t* totalBytes) const {
  Status st = makeCurrent();
  if (!st.isOk()) return st;
  size_t f = 0, t = 0;
  st = check(api_->cuMemGetInfo(&f, &t), "cuMemGetInfo_v2");
  *freeBytes = f;
  *totalBytes = t;
  return st;
}

void CudaDevice::compileKernel() const {
  if (!api_->cuModuleLoadData || !api_->cuModuleGetFunction || !api_->cuLaunchKernel) {
    kernelStatus_ = Status(Code::kUnavailable, "the CUDA driver lacks cuModuleLoadData, cuModuleGetFunction or cuLaunchKernel");
    return;
  }
  std::string ptx;
  kernelStatus_ = compilePtx(major_, minor_, &ptx);
  if (!kernelStatus_.isOk()) return;
  kernelStatus_ = makeCurrent();
  if (!kernelStatus_.isOk()) return;
  kernelStatus_ = check(api_->cuModuleLoadData(&module_, ptx.c_str()), "cuModuleLoadData");
  if (!kernelStatus_.isOk()) return;
  kernelStatus_ = check(api_->cuModuleGetFunction(&kernel_, module_, "kvf_move_blocks"), "cuModuleGetFunction");
  if (kernelStatus_.isOk()) kernelStatus_ = selfTest();
}

// One launch over known bytes before any pool relies on the kernel: pinned -> device, checked through
// an ordinary copy back. A kernel that compiled but moves the wrong bytes is then never used.
Status CudaDevice::selfTest() const {
  constexpr uint64_t kBytes = 64;
  PinnedBuffer pinned;
  DeviceBuffer device;
  Stream stream;
  Status st = pinned.allocate(*this, 4096);
  if (st.isOk()) st = device.allocate(*this, kBytes);
  if (st.isOk()) st = stream.create(*this);
  if (!st.isOk()) return st;
  uint8_t* source = pinned.host() + 256;
  uint8_t* back = pinned.host() + 512;
  for (uint64_t i = 0; i < kBytes; ++i) source[i] = static_cast<uint8_t>(i * 7 + 1);
  auto* table = reinterpret_cast<uint64_t*>(pinned.host());
  table[0] = pinned.mapped() + 256;
  table[1] = device.address();
  CUdeviceptr tableAddress = pinned.mapped();
  unsigned count = 1;
  unsigned long long vecs = kBytes / 16;
  void* params[] = {&tableAddress, &count, &vecs};
  st = check(api_->cuLaunchKernel(kernel_, 1, 1, 1, 32, 1, 1, 0, stream.get(), params, nullptr), "cuLaunchKernel");
  if (st.isOk()) st = check(api_->cuMemcpyDtoHAsync(back, device.address(), kBytes, stream.get()), "cuMemcpyDtoHAsync_v2");
  const Status done = stream.finish("the block-move kernel's self-test");
  if (!st.isOk()) return st;
  if (!done.isOk()) return done;
  for (uint64_t i = 0; i < kBytes; ++i) {
    if (back[i] != source[i]) {
      return Status(Code::kUnavailable, "the block-move kernel failed its self-test at byte " + std::to_string(i));
    }
  }
  return Status::ok();
}

Status CudaDevice::moveKernel(CUfunction* out) const {
  std::call_once(kernelOnce_, [this] { compileKernel(); });
  if (!kernelStatus_.isOk()) return kernelStatus_;
  *out = kernel_;
  return Status::ok();
}

// ---- handles ----

Status Stream::create(const CudaDevice& device) {
  reset();
  Status st = device.makeCurrent();
  if (!st.isOk()) return st;
  st = check(device.api().cuStreamCreate(&stream_, kStreamNonBlocking), "cuStreamCreate");
  if (st.isOk()) device_ = &device;
  return st;
}

void Stream::reset() {
  if (stream_ && device_->makeCurrent().isOk()) device_->api().cuStreamDestroy(stream_);
  stream_ = nullptr;
  device_ = nullptr;
}

Status Stream::finish(const char* what) const {
  const DriverApi& api = device_->api();
  CUevent event = nullptr;
  Status st = check(api.cuEventCreate(&event, kEventDisableTiming), "cuEventCreate");
  if (!st.isOk()) return st;
  st = check(api.cuEventRecord(event, stream_), "cuEventRecord");
  if (st.isOk()) st = check(api.cuEventSynchronize(event), what);
  api.cuEventDestroy(event);
  return st;
}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    device_ = other.device_;
    host_ = other.host_;
    mapped_ = other.mapped_;
    bytes_ = other.bytes_;
    other.host_ = nullptr;
    other.device_ = nullptr;
  }
  return *this;
}

Status PinnedBuffer::allocate(const CudaDevice& device, uint64_t bytes) {
  reset();
  Status st = device.makeCurrent();
  if (!st.isOk()) return st;
  void* p = nullptr;
  st = check(device.api().cuMemHostAlloc(&p, bytes, kMemHostAllocPortable | kMemHostAllocDeviceMap), "cuMemHostAlloc",
             Code::kOutOfMemory);
  if (!st.isOk()) return st;
  device_ = &device;
  host_ = static_cast<uint8_t*>(p);
  bytes_ = bytes;
  st = check(device.api().cuMemHostGetDevicePointer(&mapped_, p, 0), "cuMemHostGetDevicePointer_v2");
  if (!st.isOk()) reset();
  return st;
}

void PinnedBuffer::reset() {
  if (host_ && device_->makeCurrent().isOk()) device_->api().cuMemFreeHost(host_);
  host_ = nullptr;
  device_ = nullptr;
  mapped_ = 0;
  bytes_ = 0;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    device_ = other.device_;
    address_ = other.address_;
    bytes_ = other.bytes_;
    other.address_ = 0;
    other.device_ = nullptr;
  }
  return *this;
}

Status DeviceBuffer::allocate(const CudaDevice& device, uint64_t bytes) {
  reset();
  Status st = device.makeCurrent();
  if (!st.isOk()) return st;
  st = check(device.api().cuMemAlloc(&address_, bytes), "cuMemAlloc_v2", Code::kOutOfMemory);
  if (!st.isOk()) {
    address_ = 0;
    return st;
  }
  device_ = &device;
  bytes_ = bytes;
  return Status::ok();
}

void DeviceBuffer::reset() {
  if (address_ && device_->makeCurrent().isOk()) device_->api().cuMemFree(address_);
  address_ = 0;
  device_ = nullptr;
  bytes_ = 0;
}

}  // namespace kvfabric::cuda
