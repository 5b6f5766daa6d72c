// Module entry: exports the NativePool and MemoryFile classes, the CUDA probe and transfer benchmark, and
// registerErrorClass(), through which the TypeScript layer hands over FabricError so native failures arrive as the same
// typed errors as TS ones.
#include <napi.h>

#include "aes_gcm.h"
#include "args.h"
#include "block_checksum.h"
#include "cuda_functions.h"
#include "memory_file_wrap.h"
#include "pool_wrap.h"

namespace kvfabric::addon {
namespace {

Napi::Value registerErrorClass(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsFunction()) throwInvalid(env, "registerErrorClass expects a constructor");
  env.GetInstanceData<AddonData>()->errorClass = Napi::Persistent(info[0].As<Napi::Function>());
  return env.Undefined();
}

// CRC-32C of bytes, continuing from a previous value: the checksum a page's tokens have (block_checksum.h).
Napi::Value crc32cOf(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Uint8Array bytes = bytesArg(info, 0, "bytes");
  const uint32_t previous = info[1].IsUndefined() ? 0 : u32Arg(info, 1, "previous");
  return Napi::Number::New(env, crc32c(previous, bytes.Data(), bytes.ByteLength()));
}

Napi::Object init(Napi::Env env, Napi::Object exports) {
  auto* data = new AddonData();
  env.SetInstanceData<AddonData>(data);  // deleted by Node when the environment is torn down
  Napi::Function pool = PoolWrap::define(env);
  data->poolClass = Napi::Persistent(pool);
  exports.Set("NativePool", pool);
  Napi::Function memoryFile = MemoryFileWrap::define(env);
  data->memoryFileClass = Napi::Persistent(memoryFile);
  exports.Set("MemoryFile", memoryFile);
  exports.Set("registerErrorClass", Napi::Function::New(env, registerErrorClass, "registerErrorClass"));
  exports.Set("cudaProbe", Napi::Function::New(env, cudaProbe, "cudaProbe"));
  exports.Set("cudaTransferBench", Napi::Function::New(env, cudaTransferBench, "cudaTransferBench"));
  exports.Set("crc32c", Napi::Function::New(env, crc32cOf, "crc32c"));
  exportAesGcm(env, exports);
  exports.Set("abiVersion", Napi::Number::New(env, 4));
  return exports;
}

}  // namespace
}  // namespace kvfabric::addon

static Napi::Object initModule(Napi::Env env, Napi::Object exports) { return kvfabric::addon::init(env, exports); }

NODE_API_MODULE(kvfabric, initModule)
