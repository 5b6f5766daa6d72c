// NativePool: the JS-visible wrapper of one PagedAllocator. Thin by design: it checks arguments,
// calls the core and converts results; all semantics live in the core.
#pragma once

#include <napi.h>

#include <memory>

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
  Napi::Value fork(const Napi::CallbackInfo& info);
  Napi::Value pin(const Napi::CallbackInfo& info);
  Napi::Value unpin(const Napi::CallbackInfo& info);
  Napi::Value release(const Napi::CallbackInfo& info);
  Napi::Value blockTable(const Napi::CallbackInfo& info);
  Napi::Value stats(const Napi::CallbackInfo& info);
  Napi::Value contextStats(const Napi::CallbackInfo& info);
  Napi::Value allocateBlocks(const Napi::CallbackInfo& info);
  Napi::Value freeBlocks(const Napi::CallbackInfo& info);
  Napi::Value close(const Napi::CallbackInfo& info);

  std::shared_ptr<PagedAllocator> pool_;
};

}  // namespace kvfabric::addon
