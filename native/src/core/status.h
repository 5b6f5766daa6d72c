// Error codes and the Status value every core operation returns. The codes and their names are the
// contract with TypeScript (src/fabric/errors.ts): keep both lists in the same order.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

namespace kvfabric {

enum class Code : uint8_t {
  kOk = 0,
  kInvalidArgument,
  kOutOfRange,
  kPoolExhausted,
  kStaleHandle,
  kBusy,
  kInvalidState,
  kPermissionDenied,
  kIntegrity,
  kOutOfMemory,
  kUnavailable,
  kStorageFull,
  kIncompatible,
  kResourceExhausted,
};

inline const char* codeName(Code code) {
  switch (code) {
    case Code::kOk: return "OK";
    case Code::kInvalidArgument: return "INVALID_ARGUMENT";
    case Code::kOutOfRange: return "OUT_OF_RANGE";
    case Code::kPoolExhausted: return "POOL_EXHAUSTED";
    case Code::kStaleHandle: return "STALE_HANDLE";
    case Code::kBusy: return "BUSY";
    case Code::kInvalidState: return "INVALID_STATE";
    case Code::kPermissionDenied: return "PERMISSION_DENIED";
    case Code::kIntegrity: return "INTEGRITY";
    case Code::kOutOfMemory: return "OUT_OF_MEMORY";
    case Code::kUnavailable: return "UNAVAILABLE";
    case Code::kStorageFull: return "STORAGE_FULL";
    case Code::kIncompatible: return "INCOMPATIBLE";
    case Code::kResourceExhausted: return "RESOURCE_EXHAUSTED";
  }
  return "UNKNOWN";
}

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return Status(); }
  bool isOk() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

}  // namespace kvfabric
