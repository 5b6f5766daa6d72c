#include "stream_copy.h"

#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kvfabric {
namespace {

#if defined(__x86_64__)
const bool kHasAvx512 = __builtin_cpu_supports("avx512f");
const bool kHasAvx2 = __builtin_cpu_supports("avx2");
const bool kHasSse2 = __builtin_cpu_supports("sse2");

// Whole lines: dst 64-byte aligned, n a multiple of 64.
__attribute__((target("avx512f"))) void linesAvx512(uint8_t* dst, const uint8_t* src, size_t n) {
  for (size_t i = 0; i < n; i += 64)
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + i), _mm512_loadu_si512(src + i));
}

__attribute__((target("avx2"))) void linesAvx2(uint8_t* dst, const uint8_t* src, size_t n) {
  for (size_t i = 0; i < n; i += 32) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
  }
}
#endif

}  // namespace

void streamCopy(uint8_t* dst, const uint8_t* src, size_t n) {
#if defined(__x86_64__)
  if (kHasAvx512 || kHasAvx2) {
    size_t head = (64 - reinterpret_cast<uintptr_t>(dst) % 64) % 64;
    if (head > n) head = n;
    std::memcpy(dst, src, head);
    dst += head;
    src += head;
    n -= head;
    const size_t lines = n & ~size_t{63};
    if (kHasAvx512) {
      linesAvx512(dst, src, lines);
    } else {
      linesAvx2(dst, src, lines);
    }
    std::memcpy(dst + lines, src + lines, n - lines);
    return;
  }
#endif
  std::memcpy(dst, src, n);
}

void streamFence() {
#if defined(__x86_64__)
  if (kHasSse2) _mm_sfence();
#endif
}

}  // namespace kvfabric
