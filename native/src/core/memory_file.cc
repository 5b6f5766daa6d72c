#include "memory_file.h"

#include <cerrno>
#include <cstring>

#ifdef __linux__
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace kvfabric {

#ifdef __linux__

Status MemoryFile::open(const std::string& name) {
  close();
  fd_ = static_cast<int>(memfd_create(name.c_str(), MFD_CLOEXEC));
  if (fd_ < 0) return Status(Code::kUnavailable, std::string("memfd_create: ") + std::strerror(errno));
  return Status::ok();
}

Status MemoryFile::reserve(uint64_t bytes) {
  if (fd_ < 0) return Status(Code::kInvalidState, "the memory file is closed");
  if (bytes <= capacity_) return Status::ok();
  // Whole pages of 2 MiB steps, so a context growing a turn at a time does not remap every time.
  constexpr uint64_t kStep = uint64_t{2} << 20;
  const uint64_t size = (bytes + kStep - 1) / kStep * kStep;
  if (size > static_cast<uint64_t>(INT64_MAX)) return Status(Code::kOutOfMemory, "a memory file that large");
  if (ftruncate(fd_, static_cast<off_t>(size)) != 0) {
    return Status(Code::kOutOfMemory, std::string("growing the memory file: ") + std::strerror(errno));
  }
  // MAP_POPULATE: the pages are allocated now, once, not one fault at a time during the copy.
  void* mapped = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd_, 0);
  if (mapped == MAP_FAILED) {
    return Status(Code::kOutOfMemory, std::string("mapping the memory file: ") + std::strerror(errno));
  }
  if (data_ != nullptr) munmap(data_, capacity_);
  data_ = static_cast<uint8_t*>(mapped);
  capacity_ = size;
  return Status::ok();
}

void MemoryFile::close() {
  if (data_ != nullptr) munmap(data_, capacity_);
  if (fd_ >= 0) ::close(fd_);
  data_ = nullptr;
  capacity_ = 0;
  fd_ = -1;
}

std::string MemoryFile::path() const { return fd_ < 0 ? std::string() : "/proc/self/fd/" + std::to_string(fd_); }

#else

Status MemoryFile::open(const std::string&) { return Status(Code::kUnavailable, "memory files (memfd) need Linux"); }
Status MemoryFile::reserve(uint64_t) { return Status(Code::kInvalidState, "the memory file is closed"); }
void MemoryFile::close() {}
std::string MemoryFile::path() const { return std::string(); }

#endif

}  // namespace kvfabric
