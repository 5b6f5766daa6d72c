// NativePool method bodies: argument checks, one core call, result conversion.
#include "pool_wrap.h"

#include <cstring>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "append_job.h"
#include "args.h"
#include "memory_file_wrap.h"

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

// Async work whose outcome is a Status: resolves with value() (undefined unless a subclass has a result),
// or rejects with the FabricError.
class StatusWorker : public Napi::AsyncWorker {
 protected:
  StatusWorker(Napi::Env env, const char* name, Napi::Promise::Deferred deferred)
      : Napi::AsyncWorker(env, name), deferred_(deferred) {}

  virtual Napi::Value value() { return Env().Undefined(); }

  void OnOK() override {
    if (status_.isOk()) {
      deferred_.Resolve(value());
    } else {
      deferred_.Reject(fabricError(Env(), status_).Value());
    }
  }
  void OnError(const Napi::Error& error) override { deferred_.Reject(error.Value()); }

  Napi::Promise::Deferred deferred_;
  Status status_;
};

// Copies a read's bytes off the JS thread into a buffer of its own, which JavaScript cannot reach (so
// cannot detach or resize) before the promise resolves with it.
class ReadWorker final : public StatusWorker {
 public:
  ReadWorker(Napi::Env env, Napi::Promise::Deferred deferred, std::shared_ptr<PagedAllocator> pool, ReadLease lease,
             Napi::ArrayBuffer target)
      : StatusWorker(env, "kvfabric.read", deferred),
        pool_(std::move(pool)),
        lease_(std::move(lease)),
        target_(Napi::Persistent(target)),
        data_(static_cast<uint8_t*>(target.Data())) {}

  void Execute() override {
    lease_.copyTo(data_);
    lease_ = ReadLease();  // let blocks be reused as soon as the bytes are out
    status_ = pool_->memoryFault();
  }

 protected:
  Napi::Value value() override { return viewOf(Env(), target_.Value()); }

 private:
  std::shared_ptr<PagedAllocator> pool_;
  ReadLease lease_;
  Napi::Reference<Napi::ArrayBuffer> target_;
  uint8_t* data_;
};

// A file's worth of literal pieces and leased planes (pieces in file order, plane-major layout), written
// into a memory file off the JS thread. Resolves with the file's length in bytes.
struct FilePiece {
  std::vector<uint8_t> bytes;  // literal bytes; empty for a plane
  int64_t plane = -1;          // the block plane whose rows go here; -1 for literal bytes
  uint32_t elementBytes = 0;   // 0: rows; else element-transposed (plane_major.h)
};

class PlaneMajorWorker final : public StatusWorker {
 public:
  PlaneMajorWorker(Napi::Env env, Napi::Promise::Deferred deferred, std::shared_ptr<PagedAllocator> pool,
                   ReadLease lease, std::shared_ptr<SharedMemoryFile> file, std::vector<FilePiece> literals,
                   std::vector<uint64_t> literalOffsets, PlaneMajorLayout layout, uint64_t length)
      : StatusWorker(env, "kvfabric.planeMajor", deferred),
        pool_(std::move(pool)),
        lease_(std::move(lease)),
        file_(std::move(file)),
        literals_(std::move(literals)),
        literalOffsets_(std::move(literalOffsets)),
        layout_(std::move(layout)),
        length_(length) {}

  ~PlaneMajorWorker() override { file_->busy = false; }

  void Execute() override {
    status_ = file_->file.reserve(length_);
    if (!status_.isOk()) return;
    uint8_t* data = file_->file.data();
    for (size_t i = 0; i < literals_.size(); ++i) {
      if (!literals_[i].bytes.empty()) {
        std::memcpy(data + literalOffsets_[i], literals_[i].bytes.data(), literals_[i].bytes.size());
      }
    }
    status_ = lease_.copyPlaneMajor(layout_, data);
    lease_ = ReadLease();  // let blocks be reused as soon as the bytes are out
  }

 protected:
  Napi::Value value() override { return Napi::Number::New(Env(), static_cast<double>(length_)); }

 private:
  std::shared_ptr<PagedAllocator> pool_;
  ReadLease lease_;
  std::shared_ptr<SharedMemoryFile> file_;
  std::vector<FilePiece> literals_;
  std::vector<uint64_t> literalOffsets_;
  PlaneMajorLayout layout_;
  uint64_t length_;
};

// Copies a demote or promote between the tiers and commits it off the JS thread.
class MoveWorker final : public StatusWorker {
 public:
  MoveWorker(Napi::Env env, Napi::Promise::Deferred deferred, std::shared_ptr<PagedAllocator> pool, MoveLease lease)
      : StatusWorker(env, "kvfabric.move", deferred), pool_(std::move(pool)), lease_(std::move(lease)) {}

  void Execute() override {
    lease_.copy();
    status_ = lease_.commit();
  }

 private:
  std::shared_ptr<PagedAllocator> pool_;
  MoveLease lease_;
};

Napi::Float64Array keysToArray(Napi::Env env, const std::vector<uint64_t>& keys) {
  Napi::Float64Array out = Napi::Float64Array::New(env, keys.size());
  for (size_t i = 0; i < keys.size(); ++i) out[i] = static_cast<double>(keys[i]);
  return out;
}

// Disk keys: a Float64Array of integers in [1, 2^53) (0 means "no disk copy").
std::vector<uint64_t> diskKeysArg(const Napi::CallbackInfo& info, size_t index) {
  return integerArrayArg(info, index, "disk keys", "disk key", 1);
}

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

}  // namespace

Napi::Function PoolWrap::define(Napi::Env env) {
  return DefineClass(env, "NativePool",
                     {
                         InstanceMethod<&PoolWrap::layout>("blockLayout"),
                         InstanceMethod<&PoolWrap::createContext>("createContext"),
                         InstanceMethod<&PoolWrap::append>("append"),
                         InstanceMethod<&PoolWrap::appendAsync>("appendAsync"),
                         InstanceMethod<&PoolWrap::read>("read"),
                         InstanceMethod<&PoolWrap::readAsync>("readAsync"),
                         InstanceMethod<&PoolWrap::readBlock>("readBlock"),
                         InstanceMethod<&PoolWrap::writePlaneMajorAsync>("writePlaneMajorAsync"),
                         InstanceMethod<&PoolWrap::fork>("fork"),
                         InstanceMethod<&PoolWrap::forkPrefix>("forkPrefix"),
                         InstanceMethod<&PoolWrap::pin>("pin"),
                         InstanceMethod<&PoolWrap::unpin>("unpin"),
                         InstanceMethod<&PoolWrap::release>("release"),
                         InstanceMethod<&PoolWrap::blockTable>("blockTable"),
                         InstanceMethod<&PoolWrap::stats>("stats"),
                         InstanceMethod<&PoolWrap::contextStats>("contextStats"),
                         InstanceMethod<&PoolWrap::tenantBlocks>("tenantBlocks"),
                         InstanceMethod<&PoolWrap::allocateBlocks>("allocateBlocks"),
                         InstanceMethod<&PoolWrap::freeBlocks>("freeBlocks"),
                         InstanceMethod<&PoolWrap::close>("close"),
                         InstanceMethod<&PoolWrap::demoteAsync>("demote"),
                         InstanceMethod<&PoolWrap::promoteAsync>("promote"),
                         InstanceMethod<&PoolWrap::beginSpill>("beginSpill"),
                         InstanceMethod<&PoolWrap::spillRead>("spillRead"),
                         InstanceMethod<&PoolWrap::commitSpill>("commitSpill"),
                         InstanceMethod<&PoolWrap::beginFill>("beginFill"),
                         InstanceMethod<&PoolWrap::fillWrite>("fillWrite"),
                         InstanceMethod<&PoolWrap::commitFill>("commitFill"),
                         InstanceMethod<&PoolWrap::abortLease>("abortLease"),
                         InstanceMethod<&PoolWrap::importContext>("importContext"),
                         InstanceMethod<&PoolWrap::takeFreedDiskKeys>("takeFreedDiskKeys"),
                         InstanceMethod<&PoolWrap::pageDiskKeys>("pageDiskKeys"),
                         InstanceMethod<&PoolWrap::pageTiers>("pageTiers"),
                         InstanceMethod<&PoolWrap::pageChecksums>("pageChecksums"),
                         InstanceMethod<&PoolWrap::forgetDiskCopies>("forgetDiskCopies"),
                         InstanceMethod<&PoolWrap::backendInfo>("describeBackend"),
                         InstanceMethod<&PoolWrap::blockDeviceAddresses>("blockDeviceAddresses"),
                         InstanceMethod<&PoolWrap::exportIpcHandles>("exportIpcHandles"),
                     });
}

PoolWrap::PoolWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<PoolWrap>(info) {
  Napi::Env env = info.Env();
  const PoolOptions options = poolOptionsArg(info, 0);
  cuda::OpenedPool opened;
  check(env, cuda::openPool(options.config, options.backend, &opened));
  pool_ = std::move(opened.pool);
  deviceMemory_ = opened.deviceMemory;
  backend_ = std::move(opened.info);
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
  if (isShared(env, kv)) {
    // Another thread may write it meanwhile: one read of each byte, so the checksum is of what landed.
    std::vector<uint8_t> copy;
    try {
      copy.assign(kv.Data(), kv.Data() + kv.ByteLength());
    } catch (const std::bad_alloc&) {
      throwStatus(env, Status(Code::kOutOfMemory,
                              "cannot copy " + std::to_string(kv.ByteLength()) + " shared bytes to append"));
    }
    check(env, pool->append(ctx, copy.data(), copy.size()));
  } else {
    check(env, pool->append(ctx, kv.Data(), kv.ByteLength()));
  }
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
    startAppend(env, deferred, std::move(pool), std::move(lease), kv);
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
  check(env, pool->memoryFault());
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

Napi::Value PoolWrap::writePlaneMajorAsync(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return asPromise(env, [&](Napi::Promise::Deferred deferred) {
    auto pool = live(env);
    const Handle ctx = handleArg(info, 0, "context");
    const uint64_t start = integerArg(info, 2, "startToken", 0, kMaxSafeInteger);
    const uint64_t count = integerArg(info, 3, "tokenCount", 0, kMaxSafeInteger);
    if (!info[4].IsArray()) throwInvalid(env, "pieces must be an array of { bytes } and { plane, elementBytes? }");
    Napi::Array pieces = info[4].As<Napi::Array>();
    const BlockLayout& blocks = pool->layout();
    PlaneMajorLayout layout;
    layout.tokens = count;
    layout.offset.assign(blocks.planes, 0);
    layout.elementBytes.assign(blocks.planes, 0);
    std::vector<bool> placed(blocks.planes, false);
    std::vector<FilePiece> literals;
    std::vector<uint64_t> literalOffsets;
    uint64_t at = 0;
    const uint64_t planeBytes = count * blocks.tokenPlaneBytes;
    for (uint32_t i = 0; i < pieces.Length(); ++i) {
      Napi::Value item = pieces.Get(i);
      if (!item.IsObject()) throwInvalid(env, "each piece is { bytes } or { plane, elementBytes? }");
      Napi::Object piece = item.As<Napi::Object>();
      Napi::Value bytes = piece.Get("bytes");
      if (!bytes.IsUndefined()) {
        if (!bytes.IsTypedArray() || bytes.As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array) {
          throwInvalid(env, "a piece's bytes must be a Uint8Array");
        }
        Napi::Uint8Array view = bytes.As<Napi::Uint8Array>();
        FilePiece literal;
        // Copied now, on this thread: the caller may change or detach its buffer once this returns.
        if (view.ByteLength() > 0) {
          literal.bytes.resize(view.ByteLength());
          std::memcpy(literal.bytes.data(), view.Data(), view.ByteLength());
        }
        literalOffsets.push_back(at);
        at += view.ByteLength();
        literals.push_back(std::move(literal));
        continue;
      }
      const uint64_t plane = integerValue(env, piece.Get("plane"), "piece plane", 0, blocks.planes - 1);
      if (placed[plane]) throwInvalid(env, "plane " + std::to_string(plane) + " is placed twice");
      placed[plane] = true;
      Napi::Value element = piece.Get("elementBytes");
      layout.elementBytes[plane] =
          element.IsUndefined() ? 0 : static_cast<uint32_t>(integerValue(env, element, "elementBytes", 1, 1u << 20));
      layout.offset[plane] = at;
      at += planeBytes;
    }
    for (uint32_t p = 0; p < blocks.planes; ++p) {
      if (!placed[p]) throwInvalid(env, "plane " + std::to_string(p) + " has no place in the pieces");
    }
    uint64_t end = 0;
    check(env, layout.extent(blocks, &end));
    std::shared_ptr<SharedMemoryFile> file = MemoryFileWrap::takeForWrite(env, info[1]);
    ReadLease lease;
    Status begun = pool->beginRead(ctx, start, count, &lease);
    if (!begun.isOk()) {
      file->busy = false;
      throwStatus(env, begun);
    }
    (new PlaneMajorWorker(env, deferred, std::move(pool), std::move(lease), std::move(file), std::move(literals),
                          std::move(literalOffsets), std::move(layout), at))
        ->Queue();
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
  check(env, pool->memoryFault());
  return viewOf(env, buffer);
}

Napi::Value PoolWrap::fork(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto pool = live(env);
  Handle child;
  check(env, pool->fork(handleArg(info, 0, "context"), &child));
  return Napi::Number::New(env, static_cast<double>(child));
}

Napi::Value PoolWrap::forkPrefix(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto pool = live(env);
  Handle child;
  const Handle ctx = handleArg(info, 0, "context");
  check(env, pool->forkPrefix(ctx, integerArg(info, 1, "blocks", 0, kMaxSafeInteger), &child));
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

Napi::Value PoolWrap::perPageValues(const Napi::CallbackInfo& info, PerPageView view) {
  Napi::Env env = info.Env();
  auto pool = live(env);
  std::vector<uint32_t> values;
  check(env, ((*pool).*view)(handleArg(info, 0, "context"), &values));
  Napi::Uint32Array out = Napi::Uint32Array::New(env, values.size());
  std::copy(values.begin(), values.end(), out.Data());
  return out;
}

Napi::Value PoolWrap::blockTable(const Napi::CallbackInfo& info) {
  return perPageValues(info, &PagedAllocator::blockTable);
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
  Napi::Object host = Napi::Object::New(env);
  host.Set("totalBlocks", Napi::Number::New(env, static_cast<double>(s.host.totalBlocks)));
  host.Set("freeBlocks", Napi::Number::New(env, static_cast<double>(s.host.freeBlocks)));
  host.Set("usedBlocks", Napi::Number::New(env, static_cast<double>(s.host.usedBlocks)));
  out.Set("host", host);
  put("diskOnlyBlocks", s.diskOnlyBlocks);
  put("diskCopies", s.diskCopies);
  return out;
}

Napi::Value PoolWrap::tenantBlocks(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const std::vector<TenantBlocks> all = live(env)->tenantBlocks();
  Napi::Array out = Napi::Array::New(env, all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    Napi::Object entry = Napi::Object::New(env);
    entry.Set("tenant", Napi::Number::New(env, all[i].tenant));
    entry.Set("device", Napi::Number::New(env, static_cast<double>(all[i].device)));
    entry.Set("host", Napi::Number::New(env, static_cast<double>(all[i].host)));
    entry.Set("pinned", Napi::Number::New(env, static_cast<double>(all[i].pinned)));
    out.Set(static_cast<uint32_t>(i), entry);
  }
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
  out.Set("resident", Napi::Boolean::New(env, s.resident));
  put("devicePages", s.devicePages);
  put("hostPages", s.hostPages);
  put("diskOnlyPages", s.diskOnlyPages);
  put("diskCopies", s.diskCopies);
  return out;
}

Napi::Value PoolWrap::allocateBlocks(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto pool = live(env);
  const uint32_t tenant = u32Arg(info, 0, "tenant", 1);
  const uint32_t count = u32Arg(info, 1, "count");
  if (count > pool->deviceBlocks()) {  // before sizing anything by a caller's number
    throwStatus(env, Status(Code::kPoolExhausted, std::to_string(count) + " blocks requested from a pool of " +
                                                      std::to_string(pool->deviceBlocks())));
  }
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
  const std::vector<Handle> handles = integerArrayArg(info, 0, "handles", "block handle", 0);
  check(env, pool->freeBlocks(handles.data(), handles.size()));
  return env.Undefined();
}

Napi::Value PoolWrap::close(const Napi::CallbackInfo& info) {
  spills_.clear();  // undoes open leases while the allocator is still alive
  fills_.clear();
  pool_.reset();
  deviceMemory_ = nullptr;
  return info.Env().Undefined();
}

Napi::Value PoolWrap::demoteAsync(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return asPromise(env, [&](Napi::Promise::Deferred deferred) {
    auto pool = live(env);
    MoveLease lease;
    check(env, pool->beginDemote(handleArg(info, 0, "context"), &lease));
    (new MoveWorker(env, deferred, std::move(pool), std::move(lease)))->Queue();
  });
}

Napi::Value PoolWrap::promoteAsync(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return asPromise(env, [&](Napi::Promise::Deferred deferred) {
    auto pool = live(env);
    MoveLease lease;
    check(env, pool->beginPromote(handleArg(info, 0, "context"), &lease));
    (new MoveWorker(env, deferred, std::move(pool), std::move(lease)))->Queue();
  });
}

SpillLease& PoolWrap::spillLease(Napi::Env env, uint32_t id) {
  auto it = spills_.find(id);
  if (it == spills_.end()) throwStatus(env, Status(Code::kStaleHandle, "no open spill with that id"));
  return *it->second;
}

MoveLease& PoolWrap::fillLease(Napi::Env env, uint32_t id) {
  auto it = fills_.find(id);
  if (it == fills_.end()) throwStatus(env, Status(Code::kStaleHandle, "no open fill with that id"));
  return *it->second;
}

Napi::Value PoolWrap::beginSpill(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto pool = live(env);
  auto lease = std::make_unique<SpillLease>();
  check(env, pool->beginSpill(handleArg(info, 0, "context"), lease.get()));
  const uint32_t id = nextLeaseId_++;
  Napi::Object out = Napi::Object::New(env);
  out.Set("lease", Napi::Number::New(env, id));
  out.Set("blocks", Napi::Number::New(env, static_cast<double>(lease->blocks())));
  spills_.emplace(id, std::move(lease));
  return out;
}

Napi::Value PoolWrap::spillRead(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto pool = live(env);
  SpillLease& lease = spillLease(env, u32Arg(info, 0, "lease"));
  const uint64_t index = integerArg(info, 1, "index", 0, kMaxSafeInteger);
  if (index >= lease.blocks()) throwStatus(env, Status(Code::kOutOfRange, "spill block index out of range"));
  const uint64_t blockBytes = pool->layout().blockBytes;
  // Into the caller's bytes when given (a staging slot the disk tier encrypts in place), else a new buffer.
  Napi::Uint8Array into = info[2].IsUndefined() ? viewOf(env, newBuffer(env, blockBytes)) : bytesArg(info, 2, "into");
  if (into.ByteLength() != blockBytes)
    throwInvalid(env, "into must be exactly one block (" + std::to_string(blockBytes) + " bytes)");
  check(env, lease.copyBlock(static_cast<size_t>(index), into.Data()));
  check(env, pool->memoryFault());
  return into;
}

Napi::Value PoolWrap::commitSpill(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  live(env);
  const uint32_t id = u32Arg(info, 0, "lease");
  SpillLease& lease = spillLease(env, id);
  const std::vector<uint64_t> keys = diskKeysArg(info, 1);
  const bool dropHostFrames = info[2].IsBoolean() && info[2].As<Napi::Boolean>().Value();
  check(env, lease.commit(keys.data(), keys.size(), dropHostFrames));
  spills_.erase(id);
  return env.Undefined();
}

Napi::Value PoolWrap::beginFill(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto pool = live(env);
  auto lease = std::make_unique<MoveLease>();
  const uint64_t context = handleArg(info, 0, "context");
  const Tier target = choiceValue(env, info[1], Tier::kHost, {{"host", Tier::kHost}, {"device", Tier::kDevice}},
                                  "a fill target must be 'host' or 'device'");
  check(env, pool->beginFill(context, lease.get(), target));
  const uint32_t id = nextLeaseId_++;
  Napi::Object out = Napi::Object::New(env);
  out.Set("lease", Napi::Number::New(env, id));
  out.Set("diskKeys", keysToArray(env, lease->diskKeys()));
  fills_.emplace(id, std::move(lease));
  return out;
}

Napi::Value PoolWrap::fillWrite(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  live(env);
  MoveLease& lease = fillLease(env, u32Arg(info, 0, "lease"));
  const uint64_t index = integerArg(info, 1, "index", 0, kMaxSafeInteger);
  Napi::Uint8Array bytes = bytesArg(info, 2, "bytes");
  check(env, lease.write(static_cast<size_t>(index), bytes.Data(), bytes.ByteLength()));
  return env.Undefined();
}

Napi::Value PoolWrap::commitFill(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  live(env);
  const uint32_t id = u32Arg(info, 0, "lease");
  MoveLease& lease = fillLease(env, id);
  const Status st = lease.commit();  // a failed commit has already undone the fill
  fills_.erase(id);
  check(env, st);
  return env.Undefined();
}

Napi::Value PoolWrap::abortLease(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const uint32_t id = u32Arg(info, 0, "lease");
  spills_.erase(id);  // destroying a lease undoes it
  fills_.erase(id);
  return env.Undefined();
}

Napi::Value PoolWrap::importContext(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto pool = live(env);
  const uint32_t tenant = u32Arg(info, 0, "tenant", 1);
  const uint64_t tokens = integerArg(info, 1, "tokens", 0, kMaxSafeInteger);
  const std::vector<uint64_t> keys = diskKeysArg(info, 2);
  // Checksums, one per page, from the manifest.
  std::vector<uint32_t> checksums;
  Napi::Value v = info[3];
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_uint32_array) {
    throwInvalid(env, "checksums must be a Uint32Array");
  }
  Napi::Uint32Array given = v.As<Napi::Uint32Array>();
  if (given.ElementLength() != keys.size()) throwInvalid(env, "checksums must have one entry per disk key");
  checksums.assign(given.Data(), given.Data() + given.ElementLength());
  Handle ctx;
  check(env, pool->importContext(tenant, tokens, keys.data(), checksums.data(), keys.size(), &ctx));
  return Napi::Number::New(env, static_cast<double>(ctx));
}

Napi::Value PoolWrap::pageDiskKeys(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto pool = live(env);
  std::vector<uint64_t> keys;
  check(env, pool->pageDiskKeys(handleArg(info, 0, "context"), &keys));
  return keysToArray(env, keys);
}

Napi::Value PoolWrap::pageTiers(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto pool = live(env);
  std::vector<Tier> tiers;
  check(env, pool->pageTiers(handleArg(info, 0, "context"), &tiers));
  Napi::Uint8Array out = Napi::Uint8Array::New(env, tiers.size());
  for (size_t i = 0; i < tiers.size(); ++i) out[i] = static_cast<uint8_t>(tiers[i]);
  return out;
}

Napi::Value PoolWrap::pageChecksums(const Napi::CallbackInfo& info) {
  return perPageValues(info, &PagedAllocator::pageChecksums);
}

Napi::Value PoolWrap::forgetDiskCopies(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto pool = live(env);
  const Handle ctx = handleArg(info, 0, "context");
  const std::vector<uint64_t> keys = diskKeysArg(info, 1);
  check(env, pool->forgetDiskCopies(ctx, keys.data(), keys.size()));
  return env.Undefined();
}

Napi::Value PoolWrap::takeFreedDiskKeys(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return keysToArray(env, live(env)->takeFreedDiskKeys());
}

}  // namespace kvfabric::addon

namespace kvfabric::addon {

Napi::Value PoolWrap::backendInfo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object out = Napi::Object::New(env);
  out.Set("kind", Napi::String::New(env, backend_.cuda ? "cuda" : "cpu"));
  if (backend_.cuda) {
    out.Set("device", Napi::Number::New(env, backend_.device));
    out.Set("name", Napi::String::New(env, backend_.name));
  }
  if (!backend_.reason.empty()) out.Set("reason", Napi::String::New(env, backend_.reason));
  out.Set("transfer", Napi::String::New(env, backend_.transfer));
  out.Set("checksums", Napi::String::New(env, backend_.checksums));
  return out;
}

// The device address of each page's block, for an inference engine's block table (CUDA only).
Napi::Value PoolWrap::blockDeviceAddresses(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto pool = live(env);
  if (!deviceMemory_) throwStatus(env, Status(Code::kInvalidState, "device addresses exist only on the CUDA backend"));
  std::vector<uint32_t> frames;
  check(env, pool->blockTable(handleArg(info, 0, "context"), &frames));
  Napi::BigUint64Array out = Napi::BigUint64Array::New(env, frames.size());
  for (size_t i = 0; i < frames.size(); ++i) out[i] = deviceMemory_->address(frames[i]);
  return out;
}

// One CUDA IPC handle per device chunk: { handle (64 bytes), bytes, firstFrame, frames }.
Napi::Value PoolWrap::exportIpcHandles(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  live(env);
  if (!deviceMemory_) throwStatus(env, Status(Code::kInvalidState, "IPC handles exist only on the CUDA backend"));
  std::vector<cuda::IpcChunk> chunks;
  check(env, deviceMemory_->exportIpc(&chunks));
  Napi::Array out = Napi::Array::New(env, chunks.size());
  for (uint32_t i = 0; i < chunks.size(); ++i) {
    Napi::Object chunk = Napi::Object::New(env);
    chunk.Set("handle", Napi::Buffer<uint8_t>::Copy(env, reinterpret_cast<const uint8_t*>(chunks[i].handle.reserved),
                                                    sizeof(chunks[i].handle.reserved)));
    chunk.Set("bytes", Napi::Number::New(env, static_cast<double>(chunks[i].bytes)));
    chunk.Set("firstFrame", Napi::Number::New(env, chunks[i].firstFrame));
    chunk.Set("frames", Napi::Number::New(env, chunks[i].frames));
    out[i] = chunk;
  }
  return out;
}

}  // namespace kvfabric::addon
