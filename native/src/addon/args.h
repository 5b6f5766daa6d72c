// Turning JS values into checked C++ values, and Status values into thrown FabricErrors. Every helper
// throws (a C++ Napi::Error that node-addon-api hands to JS) instead of returning a bad value, so a
// method body reads as a straight line and no input can reach the core unchecked.
#pragma once

#include <napi.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "cuda_backend.h"
#include "paged_allocator.h"
#include "status.h"

namespace kvfabric::addon {

// Per-environment state: the FabricError constructor registered by the TS layer.
struct AddonData {
  Napi::FunctionReference errorClass;
  Napi::FunctionReference poolClass;
  Napi::FunctionReference memoryFileClass;
};

// A FabricError (or, before registration, an Error with .code) for a failed Status.
Napi::Error fabricError(Napi::Env env, const Status& status);
[[noreturn]] void throwStatus(Napi::Env env, const Status& status);
inline void check(Napi::Env env, const Status& status) {
  if (!status.isOk()) throwStatus(env, status);
}
[[noreturn]] void throwInvalid(Napi::Env env, const std::string& message);

// Integers in [min, max]; anything else (type, NaN, fraction, range) is INVALID_ARGUMENT.
uint64_t integerArg(const Napi::CallbackInfo& info, size_t index, const char* name, uint64_t min, uint64_t max);
uint32_t u32Arg(const Napi::CallbackInfo& info, size_t index, const char* name, uint32_t min = 0);
uint64_t handleArg(const Napi::CallbackInfo& info, size_t index, const char* name);
uint64_t integerValue(Napi::Env env, Napi::Value value, const char* name, uint64_t min, uint64_t max);
// A Float64Array of integers in [min, 2^53): block handles and disk keys cross as doubles.
std::vector<uint64_t> integerArrayArg(const Napi::CallbackInfo& info, size_t index, const char* name, const char* item,
                                      uint64_t min);
Napi::Uint8Array bytesArg(const Napi::CallbackInfo& info, size_t index, const char* name);
// Whether a view's memory is a SharedArrayBuffer's, which other threads may write while it is read.
bool isShared(Napi::Env env, const Napi::TypedArray& view);

// A string naming one of `choices`, or `absent` when undefined; anything else is INVALID_ARGUMENT with
// `rule` as the message.
template <typename T>
T choiceValue(Napi::Env env, Napi::Value value, T absent, std::initializer_list<std::pair<const char*, T>> choices,
              const char* rule) {
  if (value.IsUndefined()) return absent;
  if (value.IsString()) {
    const std::string s = value.As<Napi::String>().Utf8Value();
    for (const auto& [name, choice] : choices) {
      if (s == name) return choice;
    }
  }
  throwInvalid(env, rule);
}

// The NativePool constructor's options object: the pool's shape and sizes, its scrub policy and the
// backend request ({ layers, kvHeads, headDim, dtypeBytes, tokensPerBlock = 16, blockCount,
// hostBlockCount = 0, maxContexts, scrub, backend, device, deviceMemoryFraction }).
struct PoolOptions {
  PoolConfig config;
  cuda::BackendRequest backend;
};
PoolOptions poolOptionsArg(const Napi::CallbackInfo& info, size_t index);

constexpr uint64_t kMaxSafeInteger = (uint64_t{1} << 53) - 1;

}  // namespace kvfabric::addon
