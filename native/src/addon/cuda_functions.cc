// Module functions about CUDA itself, outside any pool: the probe tests and the benchmark skip on, and
// the transfer benchmark's native half (bench/transfer.bench.ts).
#include "cuda_functions.h"

#include "args.h"
#include "cuda_backend.h"
#include "transfer_bench.h"

namespace kvfabric::addon {

// cudaProbe(device = 0) -> { usable, name?, reason? }
Napi::Value cudaProbe(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const int device = info[0].IsUndefined() ? 0 : static_cast<int>(integerArg(info, 0, "device", 0, 1023));
  std::string name;
  const Status st = cuda::probe(device, &name);
  Napi::Object out = Napi::Object::New(env);
  out.Set("usable", Napi::Boolean::New(env, st.isOk()));
  if (st.isOk()) {
    out.Set("name", Napi::String::New(env, name));
  } else {
    out.Set("reason", Napi::String::New(env, st.message()));
  }
  return out;
}

// cudaTransferBench({ device, totalBytes, blockBytes: number[], repeats }) -> { deviceName, kernel, figures }.
// Synchronous: it is the benchmark process's only work.
Napi::Value cudaTransferBench(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsObject()) throwInvalid(env, "cudaTransferBench expects an options object");
  Napi::Object options = info[0].As<Napi::Object>();
  cuda::TransferBenchConfig config;
  config.device = static_cast<int>(integerValue(env, options.Get("device"), "device", 0, 1023));
  config.totalBytes = integerValue(env, options.Get("totalBytes"), "totalBytes", 1, kMaxSafeInteger);
  config.repeats = static_cast<int>(integerValue(env, options.Get("repeats"), "repeats", 1, 100));
  Napi::Value sizes = options.Get("blockBytes");
  if (!sizes.IsArray()) throwInvalid(env, "blockBytes must be an array of sizes");
  Napi::Array list = sizes.As<Napi::Array>();
  for (uint32_t i = 0; i < list.Length(); ++i) {
    config.blockBytes.push_back(integerValue(env, list.Get(i), "block size", 16, uint64_t{1} << 31));
  }
  cuda::TransferBenchResult result;
  check(env, cuda::runTransferBench(config, &result));
  Napi::Object out = Napi::Object::New(env);
  out.Set("deviceName", Napi::String::New(env, result.deviceName));
  out.Set("kernel", Napi::String::New(env, result.kernelStatus));
  Napi::Array figures = Napi::Array::New(env, result.figures.size());
  for (uint32_t i = 0; i < result.figures.size(); ++i) {
    const cuda::TransferFigure& f = result.figures[i];
    Napi::Object o = Napi::Object::New(env);
    o.Set("way", Napi::String::New(env, f.way));
    o.Set("direction", Napi::String::New(env, f.direction));
    o.Set("blockBytes", Napi::Number::New(env, static_cast<double>(f.blockBytes)));
    o.Set("bytes", Napi::Number::New(env, static_cast<double>(f.bytes)));
    if (f.skipped.empty()) {
      o.Set("seconds", Napi::Number::New(env, f.seconds));
      o.Set("gbps", Napi::Number::New(env, static_cast<double>(f.bytes) / f.seconds / 1e9));
    } else {
      o.Set("skipped", Napi::String::New(env, f.skipped));
    }
    figures[i] = o;
  }
  out.Set("figures", figures);
  return out;
}

}  // namespace kvfabric::addon
