// NativePool method bodies: argument checks, one core call, result conversion.
#include "pool_wrap.h"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "args.h"

namespace kvfabric::addon {
namespace {

// A Uint8Array over a fresh ArrayBuffer; allocation failure becomes OUT_OF_MEMORY, not a crash.
Napi::ArrayBuffer newBuffer(Napi::Env env, uint64_t bytes) {
  if (bytes > (uint64_t{1} << 32)) {
    throwStatus(env, Status(Code::kOutOfMemory, "a read of " + std::to_string(bytes) + " bytes exceeds one buffer"));
  }
  try {
    return Napi::ArrayBuffer::New(env, static_cast<size_t>(bytes));
  } catch (const Napi::Error&) {
    throwStatus(env, Status(Code::kOutOfMemory, "cannot allocate a buffer of " + std::to_string(bytes) + " bytes"));
  }
}

Napi::Uint8Array viewOf(Napi::Env env, Napi::ArrayBuffer buffer) {
  return Napi::Uint8Array::New(env, buffer.ByteLength(), buffer, 0);
}

// Copies an append's bytes and commits it off the JS thread.
class AppendWorker final : public Napi::AsyncWorker {
 public:
  AppendWorker(Napi::Env env, Napi::Promise::Deferred deferred, std::shared_ptr<PagedAllocator> pool,
               AppendLease lease, Napi::Uint8Array source)
      : Napi::AsyncWorker(env, "kvfabric.append"),
        deferred_(deferred),
        pool_(std::move(pool)),
        lease_(std::move(lease)),
        source_(Napi::Persistent(source)),
        data_(source.Data()) {}

  void Execute() override {
    lease_.copyFrom(data_);
    status_ = lease_.commit();
  }
  void OnOK() override {
    if (status_.isOk()) {
      deferred_.Resolve(Env().Undefined());
    } else {
      deferred_.Reject(fabricError(Env(), status_).Value());
    }
  }
  void OnError(const Napi::Error& error) override { deferred_.Reject(error.Value()); }

 private:
  Napi::Promise::Deferred deferred_;
  std::shared_ptr<PagedAllocator> pool_;  // declared before lease_: the lease dies first
  AppendLease lease_;
  Napi::Reference<Napi::Uint8Array> source_;
  const uint8_t* data_;
  Status status_;
};

// Copies a read's bytes into a JS-owned buffer off the JS thread.
class ReadWorker final : public Napi::AsyncWorker {
 public:
  ReadWorker(Napi::Env env, Napi::Promise::Deferred deferred, std::shared_ptr<PagedAllocator> pool, ReadLease lease,
             Napi::ArrayBuffer target)
      : Napi::AsyncWorker(env, "kvfabric.read"),
        deferred_(deferred),
        pool_(std::move(pool)),
        lease_(std::move(lease)),
        target_(Napi::Persistent(target)),
        data_(static_cast<uint8_t*>(target.Data())) {}

  void Execute() override {
    lease_.copyTo(data_);
    lease_ = ReadLease();  // let blocks be reused as soon as the bytes are out
  }
  void OnOK() override { deferred_.Resolve(viewOf(Env(), target_.Value())); }
  void OnError(const Napi::Error& error) override { deferred_.Reject(error.Value()); }

 private:
  Napi::Promise::Deferred deferred_;
  std::shared_ptr<PagedAllocator> pool_;
  ReadLease lease_;
  Napi::Reference<Napi::ArrayBuffer> target_;
  uint8_t* data_;
};

// Runs body; any error it throws rejects the promise instead of escaping synchronously.
template <typename Body>
Napi::Value asPromise(Napi::Env env, Body body) {
  Napi::Promise::Deferred deferred = Napi::Promise::Deferred::New(env);
  try {
    body(deferred);
  } catch (const Napi::Error& error) {
    deferred.Reject(error.Value());
  }
  return deferred.Promise();
}

ScrubPolicy scrubOption(Napi::Env env, Napi::Value value) {
  if (value.IsUndefined()) return ScrubPolicy::kOnTenantChange;
  if (value.IsString()) {
    const std::string s = value.As<Napi::String>().Utf8Value();
    if (s == "on-tenant-change") return ScrubPolicy::kOnTenantChange;
    if (s == "always") return ScrubPolicy::kAlways;
  }
  throwInvalid(env, "scrub must be 'on-tenant-change' or 'always'");
}

uint32_t u32Option(Napi::Env env, Napi::Object options, const char* name, uint32_t fallback, uint32_t min) {
  Napi::Value v = options.Get(name);
  if (v.IsUndefined()) return fallback;
  return static_cast<uint32_t>(integerValue(env, v, name, min, 0xFFFFFFFFu));
}

}  // namespace

Napi::Function PoolWrap::define(Napi::Env env) {
  return DefineClass(env, "NativePool",
                     {
                         InstanceMethod<&PoolWrap::layout>("layout"),
                         InstanceMethod<&PoolWrap::createContext>("createContext"),
                         InstanceMethod<&PoolWrap::append>("append"),
                         InstanceMethod<&PoolWrap::appendAsync>("appendAsync"),
                         InstanceMethod<&PoolWrap::read>("read"),
                         InstanceMethod<&PoolWrap::readAsync>("readAsync"),
                         InstanceMethod<&PoolWrap::readBlock>("readBlock"),
                         InstanceMethod<&PoolWrap::fork>("fork"),
                         InstanceMethod<&PoolWrap::pin>("pin"),
                         InstanceMethod<&PoolWrap::unpin>("unpin"),
                         InstanceMethod<&PoolWrap::release>("release"),
                         InstanceMethod<&PoolWrap::blockTable>("blockTable"),
                         InstanceMethod<&PoolWrap::stats>("stats"),
                         InstanceMethod<&PoolWrap::contextStats>("contextStats"),
                         InstanceMethod<&PoolWrap::allocateBlocks>("allocateBlocks"),
                         InstanceMethod<&PoolWrap::freeBlocks>("freeBlocks"),
                         InstanceMethod<&PoolWrap::close>("close"),
                     });
}

PoolWrap::PoolWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<PoolWrap>(info) {
  Napi::Env env = info.Env();
  if (!info[0].IsObject()) throwInvalid(env, "pool options must be an object");
  Napi::Object options = info[0].As<Napi::Object>();
  PoolConfig config;
  config.shape.layers = u32Option(env, options, "layers", 0, 1);
  config.shape.kvHeads = u32Option(env, options, "kvHeads", 0, 1);
  config.shape.headDim = u32Option(env, options, "headDim", 0, 1);
  config.shape.dtypeBytes = u32Option(env, options, "dtypeBytes", 0, 1);
  config.tokensPerBlock = u32Option(env, options, "tokensPerBlock", 16, 1);
  config.blockCount = u32Option(env, options, "blockCount", 0, 1);
  config.maxContexts = u32Option(env, options, "maxContexts", config.maxContexts, 1);
  config.scrub = scrubOption(env, options.Get("scrub"));
  std::unique_ptr<PagedAllocator> pool;
  check(env, PagedAllocator::create(config, nullptr, &pool));
  pool_ = std::move(pool);
}

std::shared_ptr<PagedAllocator> PoolWrap::live(Napi::Env env) const {
  if (!pool_) throwStatus(env, Status(Code::kInvalidState, "pool is closed"));
  return pool_;
}

Napi::Value PoolWrap::layout(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const BlockLayout& l = live(env)->layout();
  Napi::Object out = Napi::Object::New(env);
  out.Set("tokensPerBlock", Napi::Number::New(env, l.tokensPerBlock));
  out.Set("bytesPerToken", Napi::Number::New(env, static_cast<double>(l.bytesPerToken)));
  out.Set("blockBytes", Napi::Number::New(env, static_cast<double>(l.blockBytes)));
  out.Set("planes", Napi::Number::New(env, l.planes));
  out.Set("planeBytes", Napi::Number::New(env, static_cast<double>(l.planeBytes)));
  out.Set("tokenPlaneBytes", Napi::Number::New(env, static_cast<double>(l.tokenPlaneBytes)));
  return out;
}

Napi::Value PoolWrap::createContext(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto pool = live(env);
  Handle ctx;
  check(env, pool->createContext(u32Arg(info, 0, "tenant", 1), &ctx));
  return Napi::Number::New(env, static_cast<double>(ctx));
}

Napi::Value PoolWrap::append(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto pool = live(env);
  const Handle ctx = handleArg(info, 0, "context");
  Napi::Uint8Array kv = bytesArg(info, 1, "kv");
  check(env, pool->append(ctx, kv.Data(), kv.ByteLength()));
  return env.Undefined();
}

Napi::Value PoolWrap::appendAsync(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return asPromise(env, [&](Napi::Promise::Deferred deferred) {
    auto pool = live(env);
    const Handle ctx = handleArg(info, 0, "context");
    Napi::Uint8Array kv = bytesArg(info, 1, "kv");
    AppendLease lease;
    check(env, pool->beginAppend(ctx, kv.ByteLength(), &lease));
    (new AppendWorker(env, deferred, std::move(pool), std::move(lease), kv))->Queue();
  });
}

Napi::Value PoolWrap::read(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto pool = live(env);
  const Handle ctx = handleArg(info, 0, "context");
  const uint64_t start = integerArg(info, 1, "startToken", 0, kMaxSafeInteger);
  const uint64_t count = integerArg(info, 2, "tokenCount", 0, kMaxSafeInteger);
  ReadLease lease;
  check(env, pool->beginRead(ctx, start, count, &lease));
  Napi::ArrayBuffer buffer = newBuffer(env, lease.bytes());
  lease.copyTo(static_cast<uint8_t*>(buffer.Data()));
  return viewOf(env, buffer);
}

Napi::Value PoolWrap::readAsync(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return asPromise(env, [&](Napi::Promise::Deferred deferred) {
    auto pool = live(env);
    const Handle ctx = handleArg(info, 0, "context");
    const uint64_t start = integerArg(info, 1, "startToken", 0, kMaxSafeInteger);
    const uint64_t count = integerArg(info, 2, "tokenCount", 0, kMaxSafeInteger);
    ReadLease lease;
    check(env, pool->beginRead(ctx, start, count, &lease));
    Napi::ArrayBuffer buffer = newBuffer(env, lease.bytes());
    (new ReadWorker(env, deferred, std::move(pool), std::move(lease), buffer))->Queue();
  });
}

Napi::Value PoolWrap::readBlock(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto pool = live(env);
  const Handle ctx = handleArg(info, 0, "context");
  const uint64_t page = integerArg(info, 1, "pageIndex", 0, kMaxSafeInteger);
  ReadLease lease;
  check(env, pool->beginReadBlock(ctx, page, &lease));
  Napi::ArrayBuffer buffer = newBuffer(env, lease.bytes());
  lease.copyTo(static_cast<uint8_t*>(buffer.Data()));
  return viewOf(env, buffer);
}

Napi::Value PoolWrap::fork(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto pool = live(env);
  Handle child;
  check(env, pool->fork(handleArg(info, 0, "context"), &child));
  return Napi::Number::New(env, static_cast<double>(child));
}

Napi::Value PoolWrap::pin(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto pool = live(env);
  check(env, pool->pin(handleArg(info, 0, "context")));
  return env.Undefined();
}

Napi::Value PoolWrap::unpin(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto pool = live(env);
  check(env, pool->unpin(handleArg(info, 0, "context")));
  return env.Undefined();
}

Napi::Value PoolWrap::release(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto pool = live(env);
  check(env, pool->release(handleArg(info, 0, "context")));
  return env.Undefined();
}

Napi::Value PoolWrap::blockTable(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto pool = live(env);
  std::vector<uint32_t> pages;
  check(env, pool->blockTable(handleArg(info, 0, "context"), &pages));
  Napi::Uint32Array out = Napi::Uint32Array::New(env, pages.size());
  std::copy(pages.begin(), pages.end(), out.Data());
  return out;
}

Napi::Value PoolWrap::stats(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const PoolStats s = live(env)->stats();
  Napi::Object out = Napi::Object::New(env);
  auto put = [&](const char* name, uint64_t v) { out.Set(name, Napi::Number::New(env, static_cast<double>(v))); };
  put("totalBlocks", s.totalBlocks);
  put("freeBlocks", s.freeBlocks);
  put("usedBlocks", s.usedBlocks);
  put("sharedBlocks", s.sharedBlocks);
  put("blockBytes", s.blockBytes);
  put("totalBytes", s.totalBytes);
  put("usedBytes", s.usedBytes);
  put("freeBytes", s.freeBytes);
  put("contexts", s.contexts);
  put("wasteBytes", s.wasteBytes);
  return out;
}

Napi::Value PoolWrap::contextStats(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto pool = live(env);
  ContextStats s;
  check(env, pool->contextStats(handleArg(info, 0, "context"), &s));
  Napi::Object out = Napi::Object::New(env);
  auto put = [&](const char* name, uint64_t v) { out.Set(name, Napi::Number::New(env, static_cast<double>(v))); };
  put("tenant", s.tenant);
  put("tokens", s.tokens);
  put("blocks", s.blocks);
  put("sharedBlocks", s.sharedBlocks);
  put("pinCount", s.pinCount);
  put("bytes", s.bytes);
  put("wasteBytes", s.wasteBytes);
  return out;
}

Napi::Value PoolWrap::allocateBlocks(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto pool = live(env);
  const uint32_t tenant = u32Arg(info, 0, "tenant", 1);
  const uint32_t count = u32Arg(info, 1, "count");
  std::vector<Handle> handles;
  try {
    handles.resize(count);
  } catch (const std::bad_alloc&) {
    throwStatus(env, Status(Code::kOutOfMemory, "cannot hold " + std::to_string(count) + " handles"));
  }
  check(env, pool->allocateBlocks(tenant, count, handles.data()));
  Napi::Float64Array out = Napi::Float64Array::New(env, count);
  for (uint32_t i = 0; i < count; ++i) out[i] = static_cast<double>(handles[i]);
  return out;
}

Napi::Value PoolWrap::freeBlocks(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto pool = live(env);
  Napi::Value v = info[0];
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_float64_array) {
    throwInvalid(env, "handles must be a Float64Array");
  }
  Napi::Float64Array array = v.As<Napi::Float64Array>();
  std::vector<Handle> handles(array.ElementLength());
  for (size_t i = 0; i < handles.size(); ++i) {
    const double d = array[i];
    if (!(d >= 0 && d <= static_cast<double>(kMaxSafeInteger)) || std::floor(d) != d) {
      throwInvalid(env, "block handle at position " + std::to_string(i) + " is not a handle");
    }
    handles[i] = static_cast<Handle>(d);
  }
  check(env, pool->freeBlocks(handles.data(), handles.size()));
  return env.Undefined();
}

Napi::Value PoolWrap::close(const Napi::CallbackInfo& info) {
  pool_.reset();
  return info.Env().Undefined();
}

}  // namespace kvfabric::addon
