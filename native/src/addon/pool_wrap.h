// NativePool: the JS-visible wrapper of one PagedAllocator. Thin by design: it checks arguments,
// calls the core and converts results; all semantics live in the core.
#pragma once

#include <napi.h>

#include <cstdint>
#include <memory>
#include <unordered_map>

#include "cuda_backend.h"
#include "cuda_block_memory.h"
#include "paged_allocator.h"

namespace kvfabric::addon {

class PoolWrap : public Napi::ObjectWrap<PoolWrap> {
 public:
  static Napi::Function define(Napi::Env env);
  explicit PoolWrap(const Napi::CallbackInfo& info);

 private:
  // The allocator is shared with in-flight async work, so close() or garbage collection of this
  // object never frees memory a worker thread is still copying.
  std::shared_ptr<PagedAllocator> live(Napi::Env env) const;

  Napi::Value layout(const Napi::CallbackInfo& info);
  Napi::Value createContext(const Napi::CallbackInfo& info);
  Napi::Value append(const Napi::CallbackInfo& info);
  Napi::Value appendAsync(const Napi::CallbackInfo& info);
  Napi::Value read(const Napi::CallbackInfo& info);
  Napi::Value readAsync(const Napi::CallbackInfo& info);
  Napi::Value readBlock(const Napi::CallbackInfo& info);
  // (context, memoryFile, startToken, tokenCount, pieces) -> Promise<bytes>: pieces in file order, each
  // literal bytes or a block plane's rows of the tokens; every plane once (plane_major.h).
  Napi::Value writePlaneMajorAsync(const Napi::CallbackInfo& info);
  Napi::Value fork(const Napi::CallbackInfo& info);
  Napi::Value forkPrefix(const Napi::CallbackInfo& info);
  Napi::Value pin(const Napi::CallbackInfo& info);
  Napi::Value unpin(const Napi::CallbackInfo& info);
  Napi::Value release(const Napi::CallbackInfo& info);
  Napi::Value blockTable(const Napi::CallbackInfo& info);
  Napi::Value stats(const Napi::CallbackInfo& info);
  Napi::Value contextStats(const Napi::CallbackInfo& info);
  Napi::Value tenantBlocks(const Napi::CallbackInfo& info);
  Napi::Value allocateBlocks(const Napi::CallbackInfo& info);
  Napi::Value freeBlocks(const Napi::CallbackInfo& info);
  Napi::Value close(const Napi::CallbackInfo& info);
  Napi::Value demoteAsync(const Napi::CallbackInfo& info);
  Napi::Value promoteAsync(const Napi::CallbackInfo& info);
  Napi::Value beginSpill(const Napi::CallbackInfo& info);
  Napi::Value spillRead(const Napi::CallbackInfo& info);
  Napi::Value commitSpill(const Napi::CallbackInfo& info);
  Napi::Value beginFill(const Napi::CallbackInfo& info);
  Napi::Value fillWrite(const Napi::CallbackInfo& info);
  Napi::Value commitFill(const Napi::CallbackInfo& info);
  Napi::Value abortLease(const Napi::CallbackInfo& info);
  Napi::Value importContext(const Napi::CallbackInfo& info);
  Napi::Value takeFreedDiskKeys(const Napi::CallbackInfo& info);
  Napi::Value pageDiskKeys(const Napi::CallbackInfo& info);
  Napi::Value pageTiers(const Napi::CallbackInfo& info);
  Napi::Value pageChecksums(const Napi::CallbackInfo& info);
  // One uint32 per page of a context (block ids, checksums), as a Uint32Array.
  using PerPageView = Status (PagedAllocator::*)(Handle, std::vector<uint32_t>*) const;
  Napi::Value perPageValues(const Napi::CallbackInfo& info, PerPageView view);
  Napi::Value forgetDiskCopies(const Napi::CallbackInfo& info);
  Napi::Value backendInfo(const Napi::CallbackInfo& info);
  Napi::Value blockDeviceAddresses(const Napi::CallbackInfo& info);
  Napi::Value exportIpcHandles(const Napi::CallbackInfo& info);

  SpillLease& spillLease(Napi::Env env, uint32_t id);
  MoveLease& fillLease(Napi::Env env, uint32_t id);

  std::shared_ptr<PagedAllocator> pool_;
  cuda::CudaDeviceMemory* deviceMemory_ = nullptr;  // owned by pool_; null on the CPU backend
  cuda::BackendInfo backend_;
  // Spills and fills span several JS calls (the disk tier's I/O happens between them), so their leases
  // live here under ids; close() drops them, which undoes whatever was not committed.
  uint32_t nextLeaseId_ = 1;
  std::unordered_map<uint32_t, std::unique_ptr<SpillLease>> spills_;
  std::unordered_map<uint32_t, std::unique_ptr<MoveLease>> fills_;
};

}  // namespace kvfabric::addon
