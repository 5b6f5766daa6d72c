// The CUDA context as each thread uses it. ContextScope pushes a device's primary context for the span
// of some driver calls and pops it afterwards, so whatever context the thread had current before (an
// in-process inference engine's own) is left as it was; cuCtxSetCurrent would overwrite it.
// Two process-wide facts about contexts live here too:
//  - lost devices: a sticky error (illegal or misaligned address, launch failure) leaves the context
//    unusable, so every later call in the process would fail; the device is marked lost once, and
//    probes, new pools and running pools all report it with a restart-the-process message;
//  - driver calls in flight: the exit hook waits for libuv workers still inside a driver call before
//    the driver tears itself down at exit, and refuses new scopes from then on.
#pragma once

#include <string>

#include "cuda_driver.h"

namespace kvfabric::cuda {

class ContextScope {
 public:
  ContextScope(const DriverApi& api, CUcontext context, int device);
  ~ContextScope();
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;
  // ok when the context is current; else why not (device lost, process exiting, push failed).
  const Status& status() const { return status_; }

 private:
  const DriverApi& api_;
  Status status_;
  bool pushed_ = false;
  bool counted_ = false;
  int previousDevice_ = -1;
};

// CUDA_ERROR_ILLEGAL_ADDRESS and the other errors that poison a context for the rest of the process.
bool isStickyError(CUresult result);
// ok, or the status that made `device` unusable for the rest of this process.
Status lostStatus(int device);
// Marks the device of the calling thread's innermost ContextScope lost (the first cause is kept) and
// returns the restart-the-process status.
Status markScopeDeviceLost(const Status& cause);
// At exit, waits (bounded) for threads inside driver calls; installed once, after the driver loaded.
void installExitHook();

}  // namespace kvfabric::cuda
