// Argument checking and error construction for the addon, and the pool options.
#include "args.h"

#include <cmath>
#include <string>

namespace kvfabric::addon {

Napi::Error fabricError(Napi::Env env, const Status& status) {
  auto* data = env.GetInstanceData<AddonData>();
  if (data && !data->errorClass.IsEmpty()) {
    Napi::Object err = data->errorClass.New(
        {Napi::String::New(env, codeName(status.code())), Napi::String::New(env, status.message())});
    return Napi::Error(env, err);
  }
  Napi::Error err = Napi::Error::New(env, status.message());
  err.Set("code", Napi::String::New(env, codeName(status.code())));
  return err;
}

void throwStatus(Napi::Env env, const Status& status) { throw fabricError(env, status); }

void throwInvalid(Napi::Env env, const std::string& message) {
  throwStatus(env, Status(Code::kInvalidArgument, message));
}

uint64_t integerValue(Napi::Env env, Napi::Value value, const char* name, uint64_t min, uint64_t max) {
  if (!value.IsNumber()) throwInvalid(env, std::string(name) + " must be a number");
  const double d = value.As<Napi::Number>().DoubleValue();
  if (!std::isfinite(d) || std::floor(d) != d) throwInvalid(env, std::string(name) + " must be an integer");
  if (d < static_cast<double>(min) || d > static_cast<double>(max)) {
    throwInvalid(env, std::string(name) + " must be in [" + std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  return static_cast<uint64_t>(d);
}

uint64_t integerArg(const Napi::CallbackInfo& info, size_t index, const char* name, uint64_t min, uint64_t max) {
  return integerValue(info.Env(), info[index], name, min, max);
}

uint32_t u32Arg(const Napi::CallbackInfo& info, size_t index, const char* name, uint32_t min) {
  return static_cast<uint32_t>(integerArg(info, index, name, min, 0xFFFFFFFFu));
}

uint64_t handleArg(const Napi::CallbackInfo& info, size_t index, const char* name) {
  return integerArg(info, index, name, 0, kMaxSafeInteger);
}

std::vector<uint64_t> integerArrayArg(const Napi::CallbackInfo& info, size_t index, const char* name, const char* item,
                                      uint64_t min) {
  Napi::Env env = info.Env();
  Napi::Value v = info[index];
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_float64_array) {
    throwInvalid(env, std::string(name) + " must be a Float64Array");
  }
  Napi::Float64Array array = v.As<Napi::Float64Array>();
  std::vector<uint64_t> values(array.ElementLength());
  for (size_t i = 0; i < values.size(); ++i) {
    const double d = array[i];
    if (!(d >= static_cast<double>(min) && d <= static_cast<double>(kMaxSafeInteger)) || std::floor(d) != d) {
      throwInvalid(env, std::string(item) + " at position " + std::to_string(i) + " is not an integer in [" +
                            std::to_string(min) + ", 2^53)");
    }
    values[i] = static_cast<uint64_t>(d);
  }
  return values;
}

namespace {

ScrubPolicy scrubOption(Napi::Env env, Napi::Value value) {
  return choiceValue(env, value, ScrubPolicy::kAlways,
                     {{"on-tenant-change", ScrubPolicy::kOnTenantChange}, {"always", ScrubPolicy::kAlways}},
                     "scrub must be 'on-tenant-change' or 'always'");
}

cuda::BackendRequest backendOption(Napi::Env env, Napi::Object options) {
  cuda::BackendRequest request;
  request.kind = choiceValue(
      env, options.Get("backend"), request.kind,
      {{"auto", cuda::BackendKind::kAuto}, {"cpu", cuda::BackendKind::kCpu}, {"cuda", cuda::BackendKind::kCuda}},
      "backend must be 'auto', 'cpu' or 'cuda'");
  Napi::Value device = options.Get("device");
  if (!device.IsUndefined()) request.device = static_cast<int>(integerValue(env, device, "device", 0, 1023));
  Napi::Value fraction = options.Get("deviceMemoryFraction");
  if (!fraction.IsUndefined()) {
    const double f = fraction.IsNumber() ? fraction.As<Napi::Number>().DoubleValue() : -1;
    if (!(f > 0 && f <= 1)) throwInvalid(env, "deviceMemoryFraction must be a number in (0, 1]");
    request.deviceMemoryFraction = f;
  }
  return request;
}

uint32_t u32Option(Napi::Env env, Napi::Object options, const char* name, uint32_t fallback, uint32_t min) {
  Napi::Value v = options.Get(name);
  if (v.IsUndefined()) return fallback;
  return static_cast<uint32_t>(integerValue(env, v, name, min, 0xFFFFFFFFu));
}

}  // namespace

PoolOptions poolOptionsArg(const Napi::CallbackInfo& info, size_t index) {
  Napi::Env env = info.Env();
  if (!info[index].IsObject()) throwInvalid(env, "pool options must be an object");
  Napi::Object options = info[index].As<Napi::Object>();
  PoolOptions out;
  PoolConfig& config = out.config;
  config.shape.layers = u32Option(env, options, "layers", 0, 1);
  config.shape.kvHeads = u32Option(env, options, "kvHeads", 0, 1);
  config.shape.headDim = u32Option(env, options, "headDim", 0, 1);
  config.shape.dtypeBytes = u32Option(env, options, "dtypeBytes", 0, 1);
  config.tokensPerBlock = u32Option(env, options, "tokensPerBlock", 16, 1);
  config.blockCount = u32Option(env, options, "blockCount", 0, 1);
  config.hostBlockCount = u32Option(env, options, "hostBlockCount", 0, 0);
  config.maxContexts = u32Option(env, options, "maxContexts", config.maxContexts, 1);
  config.scrub = scrubOption(env, options.Get("scrub"));
  Napi::Value verify = options.Get("verifyMoves");
  if (!verify.IsUndefined()) {
    if (!verify.IsBoolean()) throwInvalid(env, "verifyMoves must be a boolean");
    config.verifyMoves = verify.As<Napi::Boolean>().Value();
  }
  out.backend = backendOption(env, options);
  return out;
}

Napi::Uint8Array bytesArg(const Napi::CallbackInfo& info, size_t index, const char* name) {
  Napi::Value v = info[index];
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array) {
    throwInvalid(info.Env(), std::string(name) + " must be a Uint8Array");
  }
  return v.As<Napi::Uint8Array>();
}

bool isShared(Napi::Env env, const Napi::TypedArray& view) {
  napi_value buffer = nullptr;
  bool plain = true;
  if (napi_get_typedarray_info(env, view, nullptr, nullptr, nullptr, &buffer, nullptr) != napi_ok ||
      napi_is_arraybuffer(env, buffer, &plain) != napi_ok) {
    return true;  // unknown: treated as the careful case
  }
  return !plain;
}

}  // namespace kvfabric::addon
