// Module-level CUDA functions of the addon (see cuda_functions.cc).
#pragma once

#include <napi.h>

namespace kvfabric::addon {

Napi::Value cudaProbe(const Napi::CallbackInfo& info);
Napi::Value cudaTransferBench(const Napi::CallbackInfo& info);

}  // namespace kvfabric::addon
