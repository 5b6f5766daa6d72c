// AES-256-GCM in place for the cold tier's crypto threads, through the OpenSSL that Node itself carries.
// Node's own crypto API returns a new buffer for every chunk it encrypts or decrypts, an allocation and a
// copy on top of the cipher (docs/cold-tier.md, "Threads and I/O"); OpenSSL works in place. The
// functions are looked up in the running process (dlsym), not linked: a Node built without them exported
// leaves gcmAvailable false, and the crypto threads keep to Node's API.
#include "aes_gcm.h"

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "args.h"

namespace kvfabric::addon {
namespace {

// The few OpenSSL 1.1/3.x entry points used, as opaque C functions: their ABI is stable across those
// versions, and no OpenSSL headers are needed to build.
struct Evp {
  void* (*ctxNew)();
  void (*ctxFree)(void*);
  const void* (*aes256Gcm)();
  int (*encryptInit)(void*, const void*, void*, const unsigned char*, const unsigned char*);
  int (*encryptUpdate)(void*, unsigned char*, int*, const unsigned char*, int);
  int (*encryptFinal)(void*, unsigned char*, int*);
  int (*decryptInit)(void*, const void*, void*, const unsigned char*, const unsigned char*);
  int (*decryptUpdate)(void*, unsigned char*, int*, const unsigned char*, int);
  int (*decryptFinal)(void*, unsigned char*, int*);
  int (*ctrl)(void*, int, int, void*);
  bool ok = false;
};

// EVP_CIPHER_CTX_ctrl's GCM commands (openssl/evp.h).
enum GcmControl : int { kSetIvLength = 0x9, kGetTag = 0x10, kSetTag = 0x11 };
constexpr size_t kKeyBytes = 32;
constexpr size_t kIvBytes = 12;
constexpr size_t kTagBytes = 16;
// EVP takes int lengths: longer items go through in steps.
constexpr size_t kStepBytes = size_t{1} << 30;

template <typename F>
bool find(F* out, const char* name) {
  *out = reinterpret_cast<F>(dlsym(RTLD_DEFAULT, name));
  return *out != nullptr;
}

const Evp& evp() {
  static const Evp table = [] {
    Evp e{};
    e.ok = find(&e.ctxNew, "EVP_CIPHER_CTX_new") && find(&e.ctxFree, "EVP_CIPHER_CTX_free") &&
           find(&e.aes256Gcm, "EVP_aes_256_gcm") && find(&e.encryptInit, "EVP_EncryptInit_ex") &&
           find(&e.encryptUpdate, "EVP_EncryptUpdate") && find(&e.encryptFinal, "EVP_EncryptFinal_ex") &&
           find(&e.decryptInit, "EVP_DecryptInit_ex") && find(&e.decryptUpdate, "EVP_DecryptUpdate") &&
           find(&e.decryptFinal, "EVP_DecryptFinal_ex") && find(&e.ctrl, "EVP_CIPHER_CTX_ctrl");
    return e;
  }();
  return table;
}

// One cipher context for one call, freed on every path.
class CipherContext {
 public:
  CipherContext() : ctx_(evp().ctxNew()) {}
  ~CipherContext() {
    if (ctx_ != nullptr) evp().ctxFree(ctx_);
  }
  CipherContext(const CipherContext&) = delete;
  CipherContext& operator=(const CipherContext&) = delete;
  void* get() const { return ctx_; }

 private:
  void* ctx_;
};

// One item's parameters, copied out of their JS views while the arguments are read: reading them runs
// getters, which may detach or resize any buffer seen before, so no view outlives the reading.
struct Item {
  size_t offset;
  size_t length;
  std::array<uint8_t, kIvBytes> iv;
  std::vector<uint8_t> aad;
  std::array<uint8_t, kTagBytes> tag;  // open only
};

Napi::Uint8Array viewArg(Napi::Env env, Napi::Value value, const std::string& name) {
  if (!value.IsTypedArray() || value.As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array) {
    throwInvalid(env, name + " must be a Uint8Array");
  }
  return value.As<Napi::Uint8Array>();
}

template <size_t N>
std::array<uint8_t, N> fixedArg(Napi::Env env, Napi::Value value, const std::string& name, const char* rule) {
  Napi::Uint8Array view = viewArg(env, value, name);
  if (view.ByteLength() != N) throwInvalid(env, rule);
  std::array<uint8_t, N> out;
  std::memcpy(out.data(), view.Data(), N);
  return out;
}

std::vector<uint8_t> bytesCopy(Napi::Env env, Napi::Value value, const std::string& name) {
  Napi::Uint8Array view = viewArg(env, value, name);
  try {
    return std::vector<uint8_t>(view.Data(), view.Data() + view.ByteLength());
  } catch (const std::bad_alloc&) {
    throwStatus(env, Status(Code::kOutOfMemory, "cannot copy " + name));
  }
}

std::vector<Item> itemsArg(Napi::Env env, Napi::Value value, bool withTags) {
  if (!value.IsArray()) throwInvalid(env, "items must be an array");
  Napi::Array array = value.As<Napi::Array>();
  std::vector<Item> items;
  const uint32_t count = array.Length();
  try {
    items.reserve(count);
  } catch (const std::bad_alloc&) {
    throwStatus(env, Status(Code::kOutOfMemory, "cannot hold " + std::to_string(count) + " items"));
  }
  for (uint32_t i = 0; i < count; ++i) {
    Napi::Value entry = array.Get(i);
    if (!entry.IsObject()) throwInvalid(env, "items[" + std::to_string(i) + "] must be an object");
    Napi::Object o = entry.As<Napi::Object>();
    Item item{};
    item.offset = static_cast<size_t>(integerValue(env, o.Get("offset"), "offset", 0, kMaxSafeInteger));
    item.length = static_cast<size_t>(integerValue(env, o.Get("length"), "length", 0, kMaxSafeInteger));
    item.iv = fixedArg<kIvBytes>(env, o.Get("iv"), "iv", "an iv is 12 bytes");
    item.aad = bytesCopy(env, o.Get("aad"), "aad");
    if (withTags) item.tag = fixedArg<kTagBytes>(env, o.Get("tag"), "tag", "a tag is 16 bytes");
    items.push_back(std::move(item));
  }
  return items;
}

// Encrypts or decrypts one item in place; false on any OpenSSL failure (for decryption: a tag mismatch).
bool crypt(bool seal, const uint8_t* key, uint8_t* bytes, const Item& item, uint8_t* tagOut) {
  const Evp& e = evp();
  CipherContext context;
  void* ctx = context.get();
  if (ctx == nullptr) return false;
  auto init = seal ? e.encryptInit : e.decryptInit;
  auto update = seal ? e.encryptUpdate : e.decryptUpdate;
  if (init(ctx, e.aes256Gcm(), nullptr, nullptr, nullptr) != 1) return false;
  if (e.ctrl(ctx, kSetIvLength, static_cast<int>(kIvBytes), nullptr) != 1) return false;
  if (init(ctx, nullptr, nullptr, key, item.iv.data()) != 1) return false;
  int written = 0;
  if (!item.aad.empty() && update(ctx, nullptr, &written, item.aad.data(), static_cast<int>(item.aad.size())) != 1)
    return false;
  for (size_t at = 0; at < item.length; at += kStepBytes) {
    const int step = static_cast<int>(std::min(kStepBytes, item.length - at));
    uint8_t* p = bytes + item.offset + at;
    if (update(ctx, p, &written, p, step) != 1 || written != step) return false;
  }
  unsigned char expected[kTagBytes];
  if (!seal) std::memcpy(expected, item.tag.data(), kTagBytes);
  if (!seal && e.ctrl(ctx, kSetTag, static_cast<int>(kTagBytes), expected) != 1) return false;
  unsigned char tail[16];
  if ((seal ? e.encryptFinal : e.decryptFinal)(ctx, tail, &written) != 1) return false;
  return !seal || e.ctrl(ctx, kGetTag, static_cast<int>(kTagBytes), tagOut) == 1;
}

// The arguments of both calls: (key, bytes, items). Everything that can run JavaScript (getters on the
// items) runs first; the view of bytes is taken last, and its length checked, after all of it, so the
// address used is the buffer's own at the time of the (synchronous) work.
struct Job {
  std::array<uint8_t, kKeyBytes> key;
  std::vector<Item> items;
  Napi::Uint8Array bytes;

  ~Job() {  // this copy of the data key does not outlive the call (volatile: the stores are not elided)
    volatile uint8_t* k = key.data();
    for (size_t i = 0; i < key.size(); ++i) k[i] = 0;
  }
};

Job jobArg(const Napi::CallbackInfo& info, bool withTags) {
  Napi::Env env = info.Env();
  Job job{fixedArg<kKeyBytes>(env, info[0], "key", "an AES-256 key is 32 bytes"), itemsArg(env, info[2], withTags), {}};
  job.bytes = viewArg(env, info[1], "bytes");
  const size_t bytes = job.bytes.ByteLength();
  for (size_t i = 0; i < job.items.size(); ++i) {
    const Item& item = job.items[i];
    if (item.offset > bytes || item.length > bytes - item.offset) {
      throwInvalid(env, "items[" + std::to_string(i) + "] runs past the bytes");
    }
  }
  return job;
}

// gcmSeal(key, bytes, items) -> tags: each item of bytes encrypted in place, its 16-byte tag in order.
Napi::Value gcmSeal(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Job job = jobArg(info, false);
  Napi::Uint8Array tags = Napi::Uint8Array::New(env, kTagBytes * job.items.size());
  for (size_t i = 0; i < job.items.size(); ++i) {
    if (!crypt(true, job.key.data(), job.bytes.Data(), job.items[i], tags.Data() + kTagBytes * i)) {
      throwStatus(env, Status(Code::kUnavailable, "OpenSSL refused an AES-256-GCM encryption"));
    }
  }
  return tags;
}

// gcmOpen(key, bytes, items) -> -1, or the first item whose tag did not verify; then every item's bytes
// are zeroed, so unverified plaintext never reaches the caller.
Napi::Value gcmOpen(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Job job = jobArg(info, true);
  uint8_t* bytes = job.bytes.Data();
  for (size_t i = 0; i < job.items.size(); ++i) {
    if (!crypt(false, job.key.data(), bytes, job.items[i], nullptr)) {
      for (const Item& item : job.items) std::memset(bytes + item.offset, 0, item.length);
      return Napi::Number::New(env, static_cast<double>(i));
    }
  }
  return Napi::Number::New(env, -1);
}

}  // namespace

void exportAesGcm(Napi::Env env, Napi::Object exports) {
  exports.Set("gcmAvailable", Napi::Boolean::New(env, evp().ok));
  if (!evp().ok) return;
  exports.Set("gcmSeal", Napi::Function::New(env, gcmSeal, "gcmSeal"));
  exports.Set("gcmOpen", Napi::Function::New(env, gcmOpen, "gcmOpen"));
}

}  // namespace kvfabric::addon
