// ContextScope, lost devices and the exit hook (see cuda_context.h).
#include "cuda_context.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>

namespace kvfabric::cuda {
namespace {

// The device whose context the calling thread's innermost scope pushed (-1: none).
thread_local int t_scopeDevice = -1;

std::atomic<int> g_inFlight{0};
std::atomic<bool> g_exiting{false};

std::mutex& lostMu() {
  static std::mutex* mu = new std::mutex();
  return *mu;
}
std::map<int, Status>& lostDevices() {
  static auto* lost = new std::map<int, Status>();  // leaked: read by threads that may outlive statics
  return *lost;
}

// How long exit waits for in-flight driver calls: a multi-GB move takes well under a second on PCIe 5.
constexpr auto kExitWait = std::chrono::seconds(10);

void waitForDriverCalls() {
  g_exiting.store(true);
  const auto deadline = std::chrono::steady_clock::now() + kExitWait;
  while (g_inFlight.load() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace

ContextScope::ContextScope(const DriverApi& api, CUcontext context, int device) : api_(api) {
  // Counted before the exiting check, so the exit hook either sees this scope or this scope sees it.
  g_inFlight.fetch_add(1);
  counted_ = true;
  if (g_exiting.load()) {
    status_ = Status(Code::kUnavailable, "the process is exiting: no new CUDA work");
    return;
  }
  status_ = lostStatus(device);
  if (!status_.isOk()) return;
  previousDevice_ = t_scopeDevice;
  t_scopeDevice = device;
  status_ = check(api.cuCtxPushCurrent(context), "cuCtxPushCurrent_v2");
  pushed_ = status_.isOk();
  if (!pushed_) t_scopeDevice = previousDevice_;
}

ContextScope::~ContextScope() {
  if (pushed_) {
    CUcontext popped = nullptr;
    api_.cuCtxPopCurrent(&popped);  // nothing to do on failure: the thread keeps what the driver says
    t_scopeDevice = previousDevice_;
  }
  if (counted_) g_inFlight.fetch_sub(1);
}

bool isStickyError(CUresult result) {
  // cuda.h: ILLEGAL_ADDRESS 700, LAUNCH_TIMEOUT 702, HARDWARE_STACK_ERROR 714, ILLEGAL_INSTRUCTION 715,
  // MISALIGNED_ADDRESS 716, INVALID_ADDRESS_SPACE 717, INVALID_PC 718, LAUNCH_FAILED 719.
  return result == 700 || result == 702 || (result >= 714 && result <= 719);
}

Status lostStatus(int device) {
  std::lock_guard<std::mutex> lock(lostMu());
  auto it = lostDevices().find(device);
  return it == lostDevices().end() ? Status::ok() : it->second;
}

Status markScopeDeviceLost(const Status& cause) {
  const int device = t_scopeDevice;
  Status lost(Code::kUnavailable,
              "CUDA device " + (device >= 0 ? std::to_string(device) : std::string("?")) + " is lost (" +
                  cause.message() +
                  "): a sticky error fails every later CUDA call in this process; restart the process");
  if (device < 0) return lost;
  std::lock_guard<std::mutex> lock(lostMu());
  return lostDevices().emplace(device, lost).first->second;  // the first cause is kept
}

void installExitHook() {
  static std::once_flag once;
  std::call_once(once, [] { std::atexit(waitForDriverCalls); });
}

}  // namespace kvfabric::cuda
