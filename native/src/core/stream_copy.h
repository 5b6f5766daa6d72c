// Copies whose stores bypass the cache (non-temporal): for bytes this core will not read again (a tier
// move, a state laid out for the engine). A cached store first reads the line it writes (read for
// ownership), so a big copy with them moves three bytes through memory for each one it copies; a
// streamed store moves two.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvfabric {

// Copies n bytes, any alignment: whole 64-byte destination lines by streamed stores where the CPU has
// them, the ragged ends by memcpy. Another thread sees the bytes only after this one's streamFence().
void streamCopy(uint8_t* dst, const uint8_t* src, size_t n);
// Orders this thread's streamed stores before what it does next (a join, a release).
void streamFence();

}  // namespace kvfabric
