// CRC-32C with the SSE4.2 instruction (three independent lanes, so its latency is hidden) or a table,
// the GF(2) shift that joins CRCs (zlib's crc32_combine, for the Castagnoli polynomial), and the
// block copy that sums while it copies. The copy's stores bypass the cache (non-temporal): a moved
// block is read next by another tier or the engine, not by this core, and the copy then runs faster
// than memcpy's (measured in bench/tiers.bench.ts against memcpy in the same run).
#include "block_checksum.h"

#include <algorithm>
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

// Three runs of `count` pieces of `length` bytes (a multiple of 8) each: every piece's CRC (crcs[lane *
// count + piece]), and, with dst, the bytes copied with stores that bypass the cache. Eight-byte loads
// feed the CRC instruction straight from memory (vector loads would need shuffles to reach it, and those
// were the bottleneck); three independent lanes hide its three-cycle latency.
__attribute__((target("sse4.2"))) void threeRuns(uint8_t* const* dst, const uint8_t* const* src, size_t length, uint32_t count, uint32_t* crcs) {
  const uint8_t* sa = src[0];
  const uint8_t* sb = src[1];
  const uint8_t* sc = src[2];
  long long* da = dst == nullptr ? nullptr : reinterpret_cast<long long*>(dst[0]);
  long long* db = dst == nullptr ? nullptr : reinterpret_cast<long long*>(dst[1]);
  long long* dc = dst == nullptr ? nullptr : reinterpret_cast<long long*>(dst[2]);
  for (uint32_t piece = 0; piece < count; ++piece) {
    uint64_t a = 0xFFFFFFFFu, b = 0xFFFFFFFFu, c = 0xFFFFFFFFu;
    for (size_t i = 0; i < length; i += 8) {
      uint64_t u, v, w;
      std::memcpy(&u, sa + i, 8);
      std::memcpy(&v, sb + i, 8);
      std::memcpy(&w, sc + i, 8);
      if (da != nullptr) {
        _mm_stream_si64(da + i / 8, static_cast<long long>(u));
        _mm_stream_si64(db + i / 8, static_cast<long long>(v));
        _mm_stream_si64(dc + i / 8, static_cast<long long>(w));
      }
      a = _mm_crc32_u64(a, u);
      b = _mm_crc32_u64(b, v);
      c = _mm_crc32_u64(c, w);
    }
    crcs[piece] = ~static_cast<uint32_t>(a);
    crcs[count + piece] = ~static_cast<uint32_t>(b);
    crcs[2 * count + piece] = ~static_cast<uint32_t>(c);
    sa += length;
    sb += length;
    sc += length;
    if (da != nullptr) {
      da += length / 8;
      db += length / 8;
      dc += length / 8;
    }
  }
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

void CrcShift::make(uint64_t length) {
  const uint32_t op = zeroBytesOperator(length);
  for (int k = 0; k < 4; ++k) {
    for (uint32_t b = 0; b < 256; ++b) table[k][b] = b == 0 ? 0 : multiplyModulo(op, b << (8 * k));
  }
}

namespace {
// Long runs go 12 KiB at a time in three interleaved 4 KiB lanes (the instruction's latency is three
// cycles), joined by a shift table made once: joining costs three lookups, not a GF(2) power per call.
constexpr size_t kLaneBytes = 4096;
const CrcShift kLaneShift = [] {
  CrcShift shift;
  shift.make(kLaneBytes);
  return shift;
}();
}  // namespace

uint32_t crc32c(uint32_t crc, const uint8_t* data, size_t n) {
#if defined(__x86_64__)
  if (kHasSse42) {
    for (; n >= 3 * kLaneBytes; data += 3 * kLaneBytes, n -= 3 * kLaneBytes) {
      const uint8_t* lanes[3] = {data, data + kLaneBytes, data + 2 * kLaneBytes};
      uint32_t crcs[3];
      threeRuns(nullptr, lanes, kLaneBytes, 1, crcs);
      for (uint32_t lane : crcs) crc = kLaneShift(crc) ^ lane;
    }
  }
#endif
  return ~rawRegister(~crc, data, n);
}

BlockChecksum::BlockChecksum(const BlockLayout& layout) : layout_(layout), lanePlanes_(layout.planes / 3) {
  const uint64_t piece = layout.tokenPlaneBytes;
  piece_.make(piece);
  secondLane_.make(piece * lanePlanes_);
  thirdLane_.make(piece * (layout.planes - 2 * lanePlanes_));
  token_.make(layout.bytesPerToken);
  otherPlanes_.make(layout.bytesPerToken - piece);
}

void BlockChecksum::kernelTables(uint32_t* out) const {
  // Slicing by 8: table k advances a byte that is followed by k more.
  std::copy(kByteTable.entry, kByteTable.entry + 256, out);
  for (int k = 1; k < 8; ++k) {
    for (uint32_t n = 0; n < 256; ++n) {
      const uint32_t previous = out[(k - 1) * 256 + n];
      out[k * 256 + n] = (previous >> 8) ^ kByteTable.entry[previous & 0xFF];
    }
  }
  for (int k = 0; k < 4; ++k) std::copy(otherPlanes_.table[k], otherPlanes_.table[k] + 256, out + (8 + k) * 256);
}

uint32_t BlockChecksum::joinPlanes(const uint32_t* planeSums) const {
  uint32_t crc = 0;
  for (uint32_t p = 0; p < layout_.planes; ++p) crc = piece_(crc) ^ planeSums[p];
  return crc;
}

uint32_t BlockChecksum::run(uint8_t* dst, const uint8_t* src, uint32_t fill, bool sum) const {
  if (!sum) fill = 0;
  if (fill > kRowsOnStack) return tokenWalk(dst, src, fill);
  const size_t length = layout_.tokenPlaneBytes;
  const uint64_t planeBytes = layout_.planeBytes;
  const uint32_t q = lanePlanes_;
  // Per token, the CRC of its pieces in each lane's planes, in plane order.
  uint32_t rows[3][kRowsOnStack];
  for (auto& lane : rows) std::fill(lane, lane + fill, 0u);
#if defined(__x86_64__)
  // Streamed eight-byte stores need eight-byte aligned destinations: frames are, when pieces are.
  const bool wide = kHasSse42 && length % 8 == 0 && (dst == nullptr || reinterpret_cast<uintptr_t>(dst) % 8 == 0);
#else
  const bool wide = false;
#endif
  for (uint32_t j = 0; j < q; ++j) {
    const uint64_t planeAt[3] = {j * planeBytes, (q + j) * planeBytes, (2 * q + j) * planeBytes};
    const uint8_t* from[3] = {src + planeAt[0], src + planeAt[1], src + planeAt[2]};
    uint8_t* to[3] = {nullptr, nullptr, nullptr};
    if (dst != nullptr) {
      for (int k = 0; k < 3; ++k) to[k] = dst + planeAt[k];
    }
    uint32_t crcs[3 * kRowsOnStack];
#if defined(__x86_64__)
    if (wide) {
      threeRuns(dst == nullptr ? nullptr : to, from, length, fill, crcs);
    } else
#endif
    {
      for (int k = 0; k < 3; ++k) {
        for (uint32_t t = 0; t < fill; ++t) {
          if (to[k] != nullptr) std::memcpy(to[k] + t * length, from[k] + t * length, length);
          crcs[k * fill + t] = crc32c(0, from[k] + t * length, length);
        }
      }
    }
    for (int k = 0; k < 3; ++k) {
      for (uint32_t t = 0; t < fill; ++t) rows[k][t] = piece_(rows[k][t]) ^ crcs[k * fill + t];
    }
    // The slots no sum covers are copied all the same: the destination frame is not scrubbed.
    for (int k = 0; dst != nullptr && k < 3; ++k) copyRest(to[k], from[k], uint64_t{fill} * length);
  }
  for (uint32_t p = 3 * q; p < layout_.planes; ++p) {  // the third lane's last planes, alone
    const uint8_t* plane = src + p * planeBytes;
    for (uint32_t t = 0; t < fill; ++t) {
      if (dst != nullptr) std::memcpy(dst + p * planeBytes + t * length, plane + t * length, length);
      rows[2][t] = piece_(rows[2][t]) ^ crc32c(0, plane + t * length, length);
    }
    if (dst != nullptr) copyRest(dst + p * planeBytes, plane, uint64_t{fill} * length);
  }
  finishCopy(dst);
  uint32_t crc = 0;
  for (uint32_t t = 0; t < fill; ++t) crc = token_(crc) ^ (thirdLane_(secondLane_(rows[0][t]) ^ rows[1][t]) ^ rows[2][t]);
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
      crc = piece_(crc) ^ crc32c(0, src + at, length);
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
