// appendAsync's work (append_job.cc): the caller's bytes cross into memory the addon owns a piece at a
// time on the JS thread, and a libuv thread copies each piece into the pool's blocks.
#pragma once

#include <napi.h>

#include <memory>

#include "paged_allocator.h"

namespace kvfabric::addon {

// Runs the append that `lease` reserved, from the bytes of `source`; `deferred` resolves once it is
// committed, or rejects with a FabricError (nothing appended). Call on the JS thread.
void startAppend(Napi::Env env, Napi::Promise::Deferred deferred, std::shared_ptr<PagedAllocator> pool,
                 AppendLease lease, Napi::Uint8Array source);

}  // namespace kvfabric::addon
