// CudaDevice (per-process device state and the NVRTC-compiled kernels) and the RAII handles.
#include "cuda_device.h"

#include <map>
#include <memory>
#include <vector>

#include "kernel_source.h"

namespace kvfabric::cuda {
namespace {

Status nvrtcFailed(const char* call, nvrtcResult r) {
  return Status(Code::kUnavailable, std::string(call) + " failed with NVRTC error " + std::to_string(r));
}

// Compiles the kernels for one target: "sm_XY" gives a CUBIN (when this NVRTC can write one), "compute_XY"
// gives PTX for the driver's JIT.
Status compileFor(const NvrtcApi& rtc, const std::string& target, bool cubin, std::string* image) {
  nvrtcProgram prog = nullptr;
  nvrtcResult r = rtc.nvrtcCreateProgram(&prog, kKernelSource, "kvfabric_kernels.cu", 0, nullptr, nullptr);
  if (r != 0) return nvrtcFailed("nvrtcCreateProgram", r);
  const std::string arch = "--gpu-architecture=" + target;
  const char* options[] = {arch.c_str()};
  r = rtc.nvrtcCompileProgram(prog, 1, options);
  if (r != 0) {
    size_t logSize = 0;
    std::string log;
    if (rtc.nvrtcGetProgramLogSize(prog, &logSize) == 0 && logSize > 1) {
      log.resize(logSize);
      if (rtc.nvrtcGetProgramLog(prog, &log[0]) != 0) log.clear();
    }
    rtc.nvrtcDestroyProgram(&prog);
    return Status(Code::kUnavailable,
                  "nvrtcCompileProgram for " + target + " failed (" + std::to_string(r) + "): " + log);
  }
  size_t size = 0;
  r = cubin ? rtc.nvrtcGetCUBINSize(prog, &size) : rtc.nvrtcGetPTXSize(prog, &size);
  if (r == 0) {
    image->resize(size);
    r = cubin ? rtc.nvrtcGetCUBIN(prog, &(*image)[0]) : rtc.nvrtcGetPTX(prog, &(*image)[0]);
  }
  rtc.nvrtcDestroyProgram(&prog);
  return r == 0 ? Status::ok() : nvrtcFailed(cubin ? "nvrtcGetCUBIN" : "nvrtcGetPTX", r);
}

// A CUBIN for the device's own architecture: no JIT at load, so no PTX ISA the driver may not know. PTX
// for compute_XY only when this NVRTC writes no CUBIN or does not know the architecture.
Status compileImage(int major, int minor, std::string* image, std::string* build) {
  const LoadedNvrtcInfo* rtc = nullptr;
  Status st = loadNvrtc(&rtc);
  if (!st.isOk()) return st;
  const std::string cc = std::to_string(major) + std::to_string(minor);
  const std::string version =
      "NVRTC " + std::to_string(rtc->major) + "." + std::to_string(rtc->minor) + " (" + rtc->library + ")";
  if (rtc->api->nvrtcGetCUBIN && rtc->api->nvrtcGetCUBINSize) {
    st = compileFor(*rtc->api, "sm_" + cc, true, image);
    if (st.isOk()) {
      *build = "cubin sm_" + cc + ", " + version;
      return st;
    }
  }
  st = compileFor(*rtc->api, "compute_" + cc, false, image);
  if (st.isOk()) *build = "ptx compute_" + cc + ", " + version;
  return st;
}

}  // namespace

Status CudaDevice::get(int index, const CudaDevice** out) {
  const DriverApi* api = nullptr;
  Status st = loadDriver(&api);
  if (!st.isOk()) return st;
  st = lostStatus(index);  // a lost device stays lost for the life of the process
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
  if ((st = check(api->cuDeviceGetAttribute(&major_, kAttrComputeCapabilityMajor, device_), "cuDeviceGetAttribute"))
          .isOk() &&
      (st = check(api->cuDeviceGetAttribute(&minor_, kAttrComputeCapabilityMinor, device_), "cuDeviceGetAttribute"))
          .isOk() &&
      (st = check(api->cuDeviceGetAttribute(&mapHost, kAttrCanMapHostMemory, device_), "cuDeviceGetAttribute"))
          .isOk()) {
    st = check(api->cuDeviceGetAttribute(&unified, kAttrUnifiedAddressing, device_), "cuDeviceGetAttribute");
  }
  if (!st.isOk()) return st;
  if (!mapHost || !unified) {
    return Status(Code::kUnavailable, "CUDA device " + std::to_string(index) + " (" + name_ +
                                          ") cannot map host memory or lacks unified addressing");
  }
  // Threads waiting on the GPU should sleep, not spin a core each. Only when nobody activated the
  // primary context yet: another library in the process may have chosen its own scheduling.
  unsigned flags = 0;
  int active = 0;
  if (api->cuDevicePrimaryCtxGetState(device_, &flags, &active) == kSuccess && !active) {
    // A refusal only costs the stream-wide fallback wait its sleep; our events block either way.
    (void)api->cuDevicePrimaryCtxSetFlags(device_, (flags & ~0x7u) | kCtxSchedBlockingSync);
  }
  // Retained for the life of the process: pools come and go, the context and its module stay valid.
  st = check(api->cuDevicePrimaryCtxRetain(&context_, device_), "cuDevicePrimaryCtxRetain");
  if (!st.isOk()) return st;
  {
    const ContextScope s = scope();
    st = s.status();
  }
  if (!st.isOk()) {
    api->cuDevicePrimaryCtxRelease(device_);  // this device is not kept: nor is its retain
    context_ = nullptr;
  }
  return st;
}

Status CudaDevice::memoryInfo(uint64_t* freeBytes, uint64_t* totalBytes) const {
  const ContextScope s = scope();
  if (!s.status().isOk()) return s.status();
  size_t f = 0, t = 0;
  Status st = check(api_->cuMemGetInfo(&f, &t), "cuMemGetInfo_v2");
  *freeBytes = f;
  *totalBytes = t;
  return st;
}

Status CudaDevice::compileKernel() const {
  if (!api_->cuModuleLoadData || !api_->cuModuleGetFunction || !api_->cuLaunchKernel || !api_->cuModuleUnload) {
    return Status(Code::kUnavailable,
                  "the CUDA driver lacks cuModuleLoadData, cuModuleGetFunction, cuModuleUnload or cuLaunchKernel");
  }
  std::string image, build;
  Status st = compileImage(major_, minor_, &image, &build);
  if (!st.isOk()) return st;
  const ContextScope s = scope();
  if (!s.status().isOk()) return s.status();
  st = check(api_->cuModuleLoadData(&module_, image.data()), "cuModuleLoadData");
  if (!st.isOk()) {
    module_ = nullptr;
    return Status(st.code(), st.message() + " (" + build + ")");
  }
  st = check(api_->cuModuleGetFunction(&kernel_, module_, "kvf_move_blocks"), "cuModuleGetFunction");
  if (st.isOk()) st = check(api_->cuModuleGetFunction(&sumKernel_, module_, "kvf_sum_planes"), "cuModuleGetFunction");
  if (st.isOk()) st = selfTest();
  if (!st.isOk()) {
    api_->cuModuleUnload(module_);  // a later attempt (after an out-of-memory) loads it again
    module_ = nullptr;
    kernel_ = nullptr;
    sumKernel_ = nullptr;
    return st;
  }
  kernelBuild_ = build;
  return st;
}

// One launch over known bytes before any pool relies on the kernel: pinned -> device, checked through
// an ordinary copy back. A kernel that compiled but moves the wrong bytes is then never used. The
// table goes to device memory first, as in BlockTransfer.
Status CudaDevice::selfTest() const {
  constexpr uint64_t kBytes = 64;
  constexpr uint64_t kTarget = 256;  // where the kernel writes, after the table in the same allocation
  PinnedBuffer pinned;
  DeviceBuffer device;
  Stream stream;
  Status st = pinned.allocate(*this, 4096);
  if (st.isOk()) st = device.allocate(*this, kTarget + kBytes);
  if (st.isOk()) st = stream.create(*this);
  if (!st.isOk()) return st;
  uint8_t* source = pinned.host() + 256;
  uint8_t* back = pinned.host() + 512;
  for (uint64_t i = 0; i < kBytes; ++i) source[i] = static_cast<uint8_t>(i * 7 + 1);
  auto* table = reinterpret_cast<uint64_t*>(pinned.host());
  table[0] = pinned.mapped() + 256;
  table[1] = device.address() + kTarget;
  CUdeviceptr tableAddress = device.address();
  unsigned count = 1;
  unsigned long long vecs = kBytes / 16;
  void* params[] = {&tableAddress, &count, &vecs};
  const ContextScope s = scope();
  if (!s.status().isOk()) return s.status();
  st = check(api_->cuMemcpyHtoDAsync(tableAddress, pinned.host(), 2 * sizeof(uint64_t), stream.get()),
             "cuMemcpyHtoDAsync_v2");
  if (st.isOk())
    st = check(api_->cuLaunchKernel(kernel_, 1, 1, 1, 32, 1, 1, 0, stream.get(), params, nullptr), "cuLaunchKernel");
  if (st.isOk()) {
    st = check(api_->cuMemcpyDtoHAsync(back, device.address() + kTarget, kBytes, stream.get()), "cuMemcpyDtoHAsync_v2");
  }
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

Status CudaDevice::settleKernels() const {
  if (!kernelSettled_) {
    const Status st = compileKernel();
    // Out of memory (a pool filled the device meanwhile) or a lost device is not the kernel's verdict:
    // keep nothing, so a later call tries again (or reports the lost device).
    if (!st.isOk() && (st.code() == Code::kOutOfMemory || !lostStatus(index_).isOk())) return st;
    kernelStatus_ = st;
    kernelSettled_ = true;
  }
  return kernelStatus_;
}

Status CudaDevice::moveKernel(CUfunction* out) const {
  std::lock_guard<std::mutex> lock(kernelMu_);
  const Status st = settleKernels();
  if (st.isOk()) *out = kernel_;
  return st;
}

Status CudaDevice::sumKernel(CUfunction* out) const {
  std::lock_guard<std::mutex> lock(kernelMu_);
  const Status st = settleKernels();
  if (st.isOk()) *out = sumKernel_;
  return st;
}

std::string CudaDevice::kernelBuild() const {
  std::lock_guard<std::mutex> lock(kernelMu_);
  return kernelBuild_;
}

// ---- handles ----

Status Stream::create(const CudaDevice& device) {
  reset();
  const ContextScope s = device.scope();
  if (!s.status().isOk()) return s.status();
  Status st = check(device.api().cuStreamCreate(&stream_, kStreamNonBlocking), "cuStreamCreate");
  if (st.isOk()) device_ = &device;
  return st;
}

void Stream::reset() {
  if (stream_) {
    const ContextScope s = device_->scope();
    if (s.status().isOk()) device_->api().cuStreamDestroy(stream_);
  }
  stream_ = nullptr;
  device_ = nullptr;
}

Status Stream::finish(const char* what) const {
  const DriverApi& api = device_->api();
  const ContextScope s = device_->scope();
  if (!s.status().isOk()) return s.status();
  CUevent event = nullptr;
  if (api.cuEventCreate(&event, kEventBlockingSync | kEventDisableTiming) == kSuccess) {
    if (api.cuEventRecord(event, stream_) == kSuccess) {
      const Status waited = check(api.cuEventSynchronize(event), what);
      api.cuEventDestroy(event);
      return waited;
    }
    api.cuEventDestroy(event);
  }
  // No event to wait on: wait for the whole stream instead, so nothing queued outlives this call.
  return check(api.cuStreamSynchronize(stream_), what);
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
  const ContextScope s = device.scope();
  if (!s.status().isOk()) return s.status();
  void* p = nullptr;
  Status st = check(device.api().cuMemHostAlloc(&p, bytes, kMemHostAllocPortable | kMemHostAllocDeviceMap),
                    "cuMemHostAlloc", Code::kOutOfMemory);
  if (!st.isOk()) return st;
  device_ = &device;
  host_ = static_cast<uint8_t*>(p);
  bytes_ = bytes;
  st = check(device.api().cuMemHostGetDevicePointer(&mapped_, p, 0), "cuMemHostGetDevicePointer_v2");
  if (!st.isOk()) reset();
  return st;
}

void PinnedBuffer::reset() {
  if (host_) {
    const ContextScope s = device_->scope();
    if (s.status().isOk()) device_->api().cuMemFreeHost(host_);
  }
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
  const ContextScope s = device.scope();
  if (!s.status().isOk()) return s.status();
  Status st = check(device.api().cuMemAlloc(&address_, bytes), "cuMemAlloc_v2", Code::kOutOfMemory);
  if (!st.isOk()) {
    address_ = 0;
    return st;
  }
  device_ = &device;
  bytes_ = bytes;
  return Status::ok();
}

void DeviceBuffer::reset() {
  if (address_) {
    const ContextScope s = device_->scope();
    if (s.status().isOk()) device_->api().cuMemFree(address_);
  }
  address_ = 0;
  device_ = nullptr;
  bytes_ = 0;
}

}  // namespace kvfabric::cuda
