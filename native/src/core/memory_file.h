// A file that lives only in memory (memfd), mapped once and kept mapped: what a sequence state is written
// into for an engine to load by path (/proc/self/fd/N), with no name in any filesystem, closed on exec,
// and gone with the process however it ends. Pages stay allocated between uses, so writing a state again
// costs a copy, not the kernel zeroing fresh pages; it only grows.
#pragma once

#include <cstdint>
#include <string>

#include "status.h"

namespace kvfabric {

class MemoryFile {
 public:
  MemoryFile() = default;
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;
  ~MemoryFile() { close(); }

  // kUnavailable where the system has no memfd (not Linux) or refuses one.
  Status open(const std::string& name);
  // Makes the file and its mapping at least `bytes` long (a new mapping when it grows; the old one's
  // bytes stay in the file); kOutOfMemory when the system will not give the memory.
  Status reserve(uint64_t bytes);
  void close();

  int fd() const { return fd_; }
  uint8_t* data() const { return data_; }
  uint64_t capacity() const { return capacity_; }
  std::string path() const;

 private:
  int fd_ = -1;
  uint8_t* data_ = nullptr;
  uint64_t capacity_ = 0;
};

}  // namespace kvfabric
