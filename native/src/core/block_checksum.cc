// CRC-32C with the SSE4.2 instruction (three independent lanes, so its latency is hidden) or a table,
// the GF(2) shift that joins CRCs (zlib's crc32_combine, for the Castagnoli polynomial), and the
// block copy that sums while it copies. The copy's stores bypass the cache (non-temporal): a moved
// block is read next by another tier or the engine, not by this core, and the copy then runs faster
// than memcpy's (measured in bench/tiers.bench.ts against memcpy in the same run).
#include "block_checksum.h"

#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kvfabric {
namespace {

constexpr uint32_t kPolynomial = 0x82F63B78;  // Castagnoli, reflected

struct ByteTable {
  uint32_t entry[256];
  ByteTable() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = c & 1 ? (c >> 1) ^ kPolynomial : c >> 1;
      entry[i] = c;
    }
  }
};
const ByteTable kByteTable;

// The raw register (no pre- or post-inversion) over bytes, by table.
uint32_t registerByTable(uint32_t reg, const uint8_t* data, size_t n) {
  for (size_t i = 0; i < n; ++i) reg = kByteTable.entry[(reg ^ data[i]) & 0xFF] ^ (reg >> 8);
  return reg;
}

// a(x) * b(x) modulo the polynomial, both reflected; a must not be 0.
uint32_t multiplyModulo(uint32_t a, uint32_t b) {
  uint32_t m = 1u << 31;
  uint32_t product = 0;
  for (;;) {
    if (a & m) {
      product ^= b;
      if ((a & (m - 1)) == 0) break;
    }
    m >>= 1;
    b = b & 1 ? (b >> 1) ^ kPolynomial : b >> 1;
  }
  return product;
}

struct PowerTable {
  uint32_t x2n[32];  // x^(2^k) modulo the polynomial
  PowerTable() {
    uint32_t p = 1u << 30;  // x^1
    x2n[0] = p;
    for (int k = 1; k < 32; ++k) x2n[k] = p = multiplyModulo(p, p);
  }
};
const PowerTable kPowers;

// x^(8 * bytes) modulo the polynomial: the operator that appends `bytes` zero bytes to a register.
uint32_t zeroBytesOperator(uint64_t bytes) {
  uint32_t p = 1u << 31;  // x^0
  unsigned k = 3;         // 8 bits a byte
  for (uint64_t n = bytes; n != 0; n >>= 1, ++k) {
    if (n & 1) p = multiplyModulo(kPowers.x2n[k & 31], p);
  }
  return p;
}

#if defined(__x86_64__)
const bool kHasSse42 = __builtin_cpu_supports("sse4.2");
const bool kHasAvx2 = kHasSse42 && __builtin_cpu_supports("avx2");

__attribute__((target("sse4.2"))) uint32_t registerBySse42(uint32_t reg, const uint8_t* data, size_t n) {
  uint64_t r = reg;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t word;
    std::memcpy(&word, data + i, 8);
    r = _mm_crc32_u64(r, word);
  }
  uint32_t r32 = static_cast<uint32_t>(r);
  for (; i < n; ++i) r32 = _mm_crc32_u8(r32, data[i]);
  return r32;
}

// Three pieces of `length` bytes (a multiple of 8): their CRCs, and, with dst, the bytes copied with
// stores that bypass the cache. Eight-byte loads feed the CRC instruction straight from memory (vector
// loads would need shuffles to reach it, and those were the bottleneck).
__attribute__((target("sse4.2"))) void threePieces(uint8_t* const* dst, const uint8_t* const* src, size_t length, uint32_t* crcs) {
  uint64_t a = 0xFFFFFFFFu, b = 0xFFFFFFFFu, c = 0xFFFFFFFFu;
  const uint8_t* sa = src[0];
  const uint8_t* sb = src[1];
  const uint8_t* sc = src[2];
  if (dst == nullptr) {
    for (size_t i = 0; i < length; i += 8) {
      uint64_t u, v, w;
      std::memcpy(&u, sa + i, 8);
      std::memcpy(&v, sb + i, 8);
      std::memcpy(&w, sc + i, 8);
      a = _mm_crc32_u64(a, u);
      b = _mm_crc32_u64(b, v);
      c = _mm_crc32_u64(c, w);
    }
  } else {
    long long* da = reinterpret_cast<long long*>(dst[0]);
    long long* db = reinterpret_cast<long long*>(dst[1]);
    long long* dc = reinterpret_cast<long long*>(dst[2]);
    for (size_t i = 0; i < length; i += 8) {
      uint64_t u, v, w;
      std::memcpy(&u, sa + i, 8);
      std::memcpy(&v, sb + i, 8);
      std::memcpy(&w, sc + i, 8);
      _mm_stream_si64(da + i / 8, static_cast<long long>(u));
      _mm_stream_si64(db + i / 8, static_cast<long long>(v));
      _mm_stream_si64(dc + i / 8, static_cast<long long>(w));
      a = _mm_crc32_u64(a, u);
      b = _mm_crc32_u64(b, v);
      c = _mm_crc32_u64(c, w);
    }
  }
  crcs[0] = ~static_cast<uint32_t>(a);
  crcs[1] = ~static_cast<uint32_t>(b);
  crcs[2] = ~static_cast<uint32_t>(c);
}

// Copies n bytes (a multiple of 32) to a 32-byte aligned dst with stores that bypass the cache.
__attribute__((target("avx2"))) void streamAvx2(uint8_t* dst, const uint8_t* src, size_t n) {
  for (size_t i = 0; i < n; i += 32) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
  }
}
#endif

uint32_t rawRegister(uint32_t reg, const uint8_t* data, size_t n) {
#if defined(__x86_64__)
  if (kHasSse42) return registerBySse42(reg, data, n);
#endif
  return registerByTable(reg, data, n);
}

}  // namespace

uint32_t crc32cCombine(uint32_t crcA, uint32_t crcB, uint64_t lengthB) {
  if (lengthB == 0) return crcA;
  return (crcA == 0 ? 0 : multiplyModulo(zeroBytesOperator(lengthB), crcA)) ^ crcB;
}

uint32_t crc32c(uint32_t crc, const uint8_t* data, size_t n) {
  // Long runs go in three lanes joined by crc32cCombine: the instruction's latency is three cycles.
  constexpr size_t kLaneMinimum = 4096;
#if defined(__x86_64__)
  if (kHasSse42 && n >= 3 * kLaneMinimum) {
    const size_t lane = (n / 3) & ~size_t{7};
    const uint32_t first = ~registerBySse42(~crc, data, lane);
    const uint32_t second = ~registerBySse42(0xFFFFFFFFu, data + lane, lane);
    const uint32_t third = ~registerBySse42(0xFFFFFFFFu, data + 2 * lane, lane);
    const uint32_t joined = crc32cCombine(crc32cCombine(first, second, lane), third, lane);
    return ~rawRegister(~joined, data + 3 * lane, n - 3 * lane);
  }
#endif
  return ~rawRegister(~crc, data, n);
}

BlockChecksum::BlockChecksum(const BlockLayout& layout) : layout_(layout) {
  const uint32_t op = zeroBytesOperator(layout.tokenPlaneBytes);
  for (int k = 0; k < 4; ++k) {
    for (uint32_t b = 0; b < 256; ++b) pieceShift_[k][b] = b == 0 ? 0 : multiplyModulo(op, b << (8 * k));
  }
}

uint32_t BlockChecksum::run(uint8_t* dst, const uint8_t* src, uint32_t fill, bool sum) const {
  if (!sum) fill = 0;
  // The walk follows memory (plane by plane, so the prefetcher streams) and keeps one running CRC per
  // token; joined in token order at the end. Larger blocks than the stack holds walk token by token.
  uint32_t rows[kRowsOnStack] = {};
  if (fill > kRowsOnStack) return tokenWalk(dst, src, fill);
  const size_t length = layout_.tokenPlaneBytes;
  const uint64_t planeBytes = layout_.planeBytes;
#if defined(__x86_64__)
  // Streamed eight-byte stores need eight-byte aligned destinations: frames are, when pieces are.
  const bool wide = kHasSse42 && length % 8 == 0 && (dst == nullptr || reinterpret_cast<uintptr_t>(dst) % 8 == 0);
#endif
  for (uint32_t p = 0; p < layout_.planes; ++p) {
    const uint8_t* plane = src + p * planeBytes;
    uint8_t* to = dst == nullptr ? nullptr : dst + p * planeBytes;
    uint32_t t = 0;
#if defined(__x86_64__)
    if (wide) {
      for (; t + 3 <= fill; t += 3) {
        const uint8_t* from[3] = {plane + t * length, plane + (t + 1) * length, plane + (t + 2) * length};
        uint8_t* into[3] = {nullptr, nullptr, nullptr};
        if (to != nullptr) {
          for (uint32_t k = 0; k < 3; ++k) into[k] = to + (t + k) * length;
        }
        uint32_t crcs[3];
        uint8_t* const* targets = to == nullptr ? nullptr : into;
        threePieces(targets, from, length, crcs);
        for (uint32_t k = 0; k < 3; ++k) rows[t + k] = shiftPiece(rows[t + k]) ^ crcs[k];
      }
    }
#endif
    for (; t < fill; ++t) {
      if (to != nullptr) std::memcpy(to + t * length, plane + t * length, length);
      rows[t] = shiftPiece(rows[t]) ^ crc32c(0, plane + t * length, length);
    }
    // The slots no sum covers are copied all the same: the destination frame is not scrubbed.
    if (to != nullptr) copyRest(to, plane, uint64_t{fill} * length);
  }
  finishCopy(dst);
  uint32_t crc = 0;
  for (uint32_t t = 0; t < fill; ++t) crc = crc32cCombine(crc, rows[t], layout_.bytesPerToken);
  return crc;
}

uint32_t BlockChecksum::tokenWalk(uint8_t* dst, const uint8_t* src, uint32_t fill) const {
  const size_t length = layout_.tokenPlaneBytes;
  const uint64_t planeBytes = layout_.planeBytes;
  uint32_t crc = 0;
  for (uint32_t t = 0; t < fill; ++t) {
    for (uint32_t p = 0; p < layout_.planes; ++p) {
      const uint64_t at = p * planeBytes + t * length;
      if (dst != nullptr) std::memcpy(dst + at, src + at, length);
      crc = shiftPiece(crc) ^ crc32c(0, src + at, length);
    }
  }
  for (uint32_t p = 0; dst != nullptr && p < layout_.planes; ++p) copyRest(dst + p * planeBytes, src + p * planeBytes, uint64_t{fill} * length);
  finishCopy(dst);
  return crc;
}

void BlockChecksum::copyRest(uint8_t* plane, const uint8_t* source, uint64_t from) const {
  const uint64_t rest = layout_.planeBytes - from;
  if (rest == 0) return;
#if defined(__x86_64__)
  if (kHasAvx2 && rest % 32 == 0 && reinterpret_cast<uintptr_t>(plane + from) % 32 == 0) {
    streamAvx2(plane + from, source + from, rest);
    return;
  }
#endif
  std::memcpy(plane + from, source + from, rest);
}

void BlockChecksum::finishCopy(uint8_t* dst) {
#if defined(__x86_64__)
  if (dst != nullptr && kHasSse42) _mm_sfence();  // streamed stores reach other threads only after a fence
#else
  (void)dst;
#endif
}

}  // namespace kvfabric
