// One GPU as the process sees it: its primary context (retained for the life of the process, so kernels
// and memory of every pool on it stay valid, and set to blocking-sync scheduling when we are the first to
// activate it), its description, and the kernels (src/cuda/kernels: gather/scatter and page checksums)
// compiled with NVRTC when present. Plus the RAII handles the backend builds on.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <utility>

#include "cuda_context.h"
#include "cuda_driver.h"

namespace kvfabric::cuda {

class CudaDevice {
 public:
  // The device at index, opened once per process; kUnavailable naming the reason when unusable.
  static Status get(int index, const CudaDevice** out);

  const DriverApi& api() const { return *api_; }
  int index() const { return index_; }
  const std::string& name() const { return name_; }
  uint64_t totalBytes() const { return totalBytes_; }
  int computeMajor() const { return major_; }
  int computeMinor() const { return minor_; }
  // Every driver call on a thread needs the context current there (worker threads come and go): a
  // scope pushes it and pops it again, leaving the thread's own context (another library's) in place.
  ContextScope scope() const { return ContextScope(*api_, context_, index_); }
  Status memoryInfo(uint64_t* freeBytes, uint64_t* totalBytes) const;
  // The block-move kernel, compiled and self-tested on first use; kUnavailable (with why) when NVRTC or
  // the driver refuses it. Only a definitive answer is kept: running out of memory is tried again later.
  Status moveKernel(CUfunction* out) const;
  // The page-checksum kernel of the same module (DeviceChecksum self-tests it per pool layout).
  Status sumKernel(CUfunction* out) const;
  // How the kernels were built ("cubin sm_90, NVRTC 13.0"); empty until they were.
  std::string kernelBuild() const;

 private:
  CudaDevice() = default;
  Status open(const DriverApi* api, int index);
  Status compileKernel() const;
  Status selfTest() const;
  // Compiles the module once (under kernelMu_); kernelStatus_ is then the answer.
  Status settleKernels() const;

  const DriverApi* api_ = nullptr;
  int index_ = 0;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  std::string name_;
  uint64_t totalBytes_ = 0;
  int major_ = 0, minor_ = 0;

  mutable std::mutex kernelMu_;
  mutable bool kernelSettled_ = false;
  mutable Status kernelStatus_;
  mutable std::string kernelBuild_;
  mutable CUmodule module_ = nullptr;
  mutable CUfunction kernel_ = nullptr;
  mutable CUfunction sumKernel_ = nullptr;
};

// A non-blocking stream, destroyed with its owner.
class Stream {
 public:
  Stream() = default;
  ~Stream() { reset(); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  Status create(const CudaDevice& device);
  CUstream get() const { return stream_; }
  // Waits, on the calling thread, until everything queued so far on this stream has run: one
  // blocking-sync event recorded after the work and synchronised, so other threads' later work is not
  // waited for and the thread sleeps. When the event cannot be made or recorded it synchronises the
  // whole stream instead: returning while copies still run would let DMA write into freed buffers.
  Status finish(const char* what) const;

 private:
  void reset();
  const CudaDevice* device_ = nullptr;
  CUstream stream_ = nullptr;
};

// Pinned, device-mapped host memory (cuMemHostAlloc PORTABLE | DEVICEMAP).
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer() { reset(); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  PinnedBuffer(PinnedBuffer&& other) noexcept { *this = std::move(other); }
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  Status allocate(const CudaDevice& device, uint64_t bytes);
  uint8_t* host() const { return host_; }
  CUdeviceptr mapped() const { return mapped_; }  // the same bytes as the GPU addresses them
  uint64_t bytes() const { return bytes_; }
  void reset();

 private:
  const CudaDevice* device_ = nullptr;
  uint8_t* host_ = nullptr;
  CUdeviceptr mapped_ = 0;
  uint64_t bytes_ = 0;
};

// One cuMemAlloc allocation.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  Status allocate(const CudaDevice& device, uint64_t bytes);
  CUdeviceptr address() const { return address_; }
  uint64_t bytes() const { return bytes_; }
  void reset();

 private:
  const CudaDevice* device_ = nullptr;
  CUdeviceptr address_ = 0;
  uint64_t bytes_ = 0;
};

}  // namespace kvfabric::cuda
