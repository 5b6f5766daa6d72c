// MemoryFile: the JS-visible memory file (core/memory_file.h) a pool writes sequence states into.
// One write at a time: a second while one runs is BUSY, and so is close() (the worker holds the file).
#pragma once

#include <napi.h>

#include <atomic>
#include <memory>

#include "memory_file.h"

namespace kvfabric::addon {

// Shared with an in-flight write, which marks it busy for its duration.
struct SharedMemoryFile {
  MemoryFile file;
  std::atomic<bool> busy{false};
};

class MemoryFileWrap : public Napi::ObjectWrap<MemoryFileWrap> {
 public:
  static Napi::Function define(Napi::Env env);
  explicit MemoryFileWrap(const Napi::CallbackInfo& info);

  // The file behind a JS MemoryFile, marked busy for a write; INVALID_ARGUMENT when `value` is not a
  // MemoryFile, INVALID_STATE when closed, BUSY when another write holds it.
  static std::shared_ptr<SharedMemoryFile> takeForWrite(Napi::Env env, Napi::Value value);

 private:
  Napi::Value path(const Napi::CallbackInfo& info);
  Napi::Value capacity(const Napi::CallbackInfo& info);
  Napi::Value close(const Napi::CallbackInfo& info);

  std::shared_ptr<SharedMemoryFile> file_;
};

}  // namespace kvfabric::addon
