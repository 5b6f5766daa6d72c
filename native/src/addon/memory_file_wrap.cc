#include "memory_file_wrap.h"

#include <new>
#include <string>

#include "args.h"

namespace kvfabric::addon {

Napi::Function MemoryFileWrap::define(Napi::Env env) {
  return DefineClass(env, "MemoryFile",
                     {
                         InstanceAccessor<&MemoryFileWrap::path>("path"),
                         InstanceAccessor<&MemoryFileWrap::capacity>("capacity"),
                         InstanceMethod<&MemoryFileWrap::close>("close"),
                     });
}

MemoryFileWrap::MemoryFileWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<MemoryFileWrap>(info) {
  Napi::Env env = info.Env();
  if (!info[0].IsString()) throwInvalid(env, "MemoryFile takes a name (a string, shown in /proc/self/fd)");
  try {
    file_ = std::make_shared<SharedMemoryFile>();
  } catch (const std::bad_alloc&) {
    throwStatus(env, Status(Code::kOutOfMemory, "out of host memory"));
  }
  check(env, file_->file.open(info[0].As<Napi::String>().Utf8Value()));
}

std::shared_ptr<SharedMemoryFile> MemoryFileWrap::takeForWrite(Napi::Env env, Napi::Value value) {
  auto* data = env.GetInstanceData<AddonData>();
  if (!value.IsObject() || !value.As<Napi::Object>().InstanceOf(data->memoryFileClass.Value())) {
    throwInvalid(env, "file must be a MemoryFile");
  }
  std::shared_ptr<SharedMemoryFile> file = Unwrap(value.As<Napi::Object>())->file_;
  if (file->file.fd() < 0) throwStatus(env, Status(Code::kInvalidState, "the memory file is closed"));
  bool idle = false;
  if (!file->busy.compare_exchange_strong(idle, true)) {
    throwStatus(env, Status(Code::kBusy, "the memory file is being written"));
  }
  return file;
}

Napi::Value MemoryFileWrap::path(const Napi::CallbackInfo& info) {
  return Napi::String::New(info.Env(), file_->file.path());
}

Napi::Value MemoryFileWrap::capacity(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), static_cast<double>(file_->file.capacity()));
}

Napi::Value MemoryFileWrap::close(const Napi::CallbackInfo& info) {
  if (file_->busy.load()) throwStatus(info.Env(), Status(Code::kBusy, "the memory file is being written"));
  file_->file.close();
  return info.Env().Undefined();
}

}  // namespace kvfabric::addon
