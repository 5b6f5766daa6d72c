// AES-256-GCM in place (aes_gcm.cc): gcmAvailable, gcmSeal and gcmOpen on the addon's exports.
#pragma once

#include <napi.h>

namespace kvfabric::addon {

void exportAesGcm(Napi::Env env, Napi::Object exports);

}  // namespace kvfabric::addon
