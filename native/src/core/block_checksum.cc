// CRC-32C by folding 64-byte vectors with carry-less multiplies (AVX-512 VPCLMULQDQ), by the SSE4.2
// instruction (three independent lanes, so its latency is hidden) or by a table; the GF(2) shift that
// joins CRCs (zlib's crc32_combine, for the Castagnoli polynomial); and the block copy that sums while
// it copies. The copy's stores bypass the cache (non-temporal): a moved block is read next by another
// tier or the engine, not by this core, so caching it would only evict what this core does read
// (bench/tiers.bench.ts sets the copy against memcpy in the same run).
#include "block_checksum.h"

#include <algorithm>
#include <cstring>

#include "stream_copy.h"

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

// x^bits modulo the polynomial.
uint32_t powerModulo(uint64_t bits) {
  uint32_t p = 1u << 31;  // x^0
  for (unsigned k = 0; bits != 0; bits >>= 1, ++k) {
    if (bits & 1) p = multiplyModulo(kPowers.x2n[k & 31], p);
  }
  return p;
}

// x^(8 * bytes) modulo the polynomial: the operator that appends `bytes` zero bytes to a register.
uint32_t zeroBytesOperator(uint64_t bytes) { return powerModulo(8 * bytes); }

#if defined(__x86_64__)
const bool kHasSse42 = __builtin_cpu_supports("sse4.2");
const bool kHasAvx2 = kHasSse42 && __builtin_cpu_supports("avx2");
const bool kHasVectorFold = kHasAvx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                            __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("vpclmulqdq");

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
__attribute__((target("sse4.2"))) void threeRuns(uint8_t* const* dst, const uint8_t* const* src, size_t length,
                                                 uint32_t count, uint32_t* crcs) {
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

// Folding: a 128-bit lane of data D bits before the lane it joins moves forward by carry-less multiplies,
// its low half by x^(D+63) and its high half by x^(D-1) (modulo the polynomial, bit-reflected into the
// top of a 64-bit word), and the products xor into that lane. Each pair is {low, high}.
struct FoldConstants {
  alignas(16) uint64_t by512[2];  // a vector over the next vector
  alignas(16) uint64_t by384[2];  // its lanes onto its last lane
  alignas(16) uint64_t by256[2];
  alignas(16) uint64_t by128[2];
  FoldConstants() {
    set(by512, 512);
    set(by384, 384);
    set(by256, 256);
    set(by128, 128);
  }
  static void set(uint64_t* pair, uint64_t bits) {
    pair[0] = uint64_t{powerModulo(bits + 63)} << 32;
    pair[1] = uint64_t{powerModulo(bits - 1)} << 32;
  }
};
const FoldConstants kFold;

#define KVFABRIC_FOLD_TARGET __attribute__((target("avx512f,avx512vl,vpclmulqdq,pclmul,sse4.2")))

KVFABRIC_FOLD_TARGET inline __m128i foldOnto(__m128i into, __m128i lane, const uint64_t* pair) {
  const __m128i k = _mm_load_si128(reinterpret_cast<const __m128i*>(pair));
  return _mm_ternarylogic_epi64(into, _mm_clmulepi64_si128(lane, k, 0x00), _mm_clmulepi64_si128(lane, k, 0x11), 0x96);
}

// The CRC of the bytes a vector accumulator stands for: its four lanes folded onto the last, whose 16
// bytes the CRC instruction then reduces (the register the data left, the initial one xored in first).
KVFABRIC_FOLD_TARGET inline uint32_t reduceFold(__m512i x) {
  // Through memory: GCC 12's lane extracts warn of the undefined vector they start from.
  alignas(64) __m128i lanes[4];
  _mm512_store_si512(lanes, x);
  __m128i last = lanes[3];
  last = foldOnto(last, lanes[0], kFold.by384);
  last = foldOnto(last, lanes[1], kFold.by256);
  last = foldOnto(last, lanes[2], kFold.by128);
  const uint64_t r = _mm_crc32_u64(_mm_crc32_u64(0, static_cast<uint64_t>(_mm_cvtsi128_si64(last))),
                                   static_cast<uint64_t>(_mm_extract_epi64(last, 1)));
  return ~static_cast<uint32_t>(r);
}

// threeRuns by folding, for `length` a multiple of 64 and, with dst, 64-byte aligned destinations. Each
// lane keeps one accumulator (a multiply's latency, hidden by the three lanes); loads and whole-line
// streamed stores are 64 bytes, and folding sums faster than the copy moves bytes, so the copy, not the
// sum, sets the pace.
KVFABRIC_FOLD_TARGET void threeFolds(uint8_t* const* dst, const uint8_t* const* src, size_t length, uint32_t count,
                                     uint32_t* crcs) {
  const __m512i k = _mm512_set_epi64(kFold.by512[1], kFold.by512[0], kFold.by512[1], kFold.by512[0], kFold.by512[1],
                                     kFold.by512[0], kFold.by512[1], kFold.by512[0]);
  const __m512i initial = _mm512_castsi128_si512(_mm_cvtsi32_si128(-1));  // the register before any byte
  const uint8_t* s[3] = {src[0], src[1], src[2]};
  uint8_t* d[3] = {nullptr, nullptr, nullptr};
  if (dst != nullptr) std::copy(dst, dst + 3, d);
  for (uint32_t piece = 0; piece < count; ++piece) {
    __m512i a = _mm512_loadu_si512(s[0]);
    __m512i b = _mm512_loadu_si512(s[1]);
    __m512i c = _mm512_loadu_si512(s[2]);
    if (dst != nullptr) {
      _mm512_stream_si512(reinterpret_cast<__m512i*>(d[0]), a);
      _mm512_stream_si512(reinterpret_cast<__m512i*>(d[1]), b);
      _mm512_stream_si512(reinterpret_cast<__m512i*>(d[2]), c);
    }
    a = _mm512_xor_si512(a, initial);
    b = _mm512_xor_si512(b, initial);
    c = _mm512_xor_si512(c, initial);
    for (size_t i = 64; i < length; i += 64) {
      const __m512i u = _mm512_loadu_si512(s[0] + i);
      const __m512i v = _mm512_loadu_si512(s[1] + i);
      const __m512i w = _mm512_loadu_si512(s[2] + i);
      if (dst != nullptr) {
        _mm512_stream_si512(reinterpret_cast<__m512i*>(d[0] + i), u);
        _mm512_stream_si512(reinterpret_cast<__m512i*>(d[1] + i), v);
        _mm512_stream_si512(reinterpret_cast<__m512i*>(d[2] + i), w);
      }
      a = _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(a, k, 0x00), _mm512_clmulepi64_epi128(a, k, 0x11), u,
                                    0x96);
      b = _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(b, k, 0x00), _mm512_clmulepi64_epi128(b, k, 0x11), v,
                                    0x96);
      c = _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(c, k, 0x00), _mm512_clmulepi64_epi128(c, k, 0x11), w,
                                    0x96);
    }
    crcs[piece] = reduceFold(a);
    crcs[count + piece] = reduceFold(b);
    crcs[2 * count + piece] = reduceFold(c);
    for (int lane = 0; lane < 3; ++lane) {
      s[lane] += length;
      if (dst != nullptr) d[lane] += length;
    }
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
  // Streamed stores need destinations aligned to their width: frames are, when pieces are.
  const bool folded =
      kHasVectorFold && length % 64 == 0 && (dst == nullptr || reinterpret_cast<uintptr_t>(dst) % 64 == 0);
  const bool wide = kHasSse42 && length % 8 == 0 && (dst == nullptr || reinterpret_cast<uintptr_t>(dst) % 8 == 0);
#else
  const bool folded = false;
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
    if (folded) {
      threeFolds(dst == nullptr ? nullptr : to, from, length, fill, crcs);
    } else if (wide) {
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
  for (uint32_t t = 0; t < fill; ++t)
    crc = token_(crc) ^ (thirdLane_(secondLane_(rows[0][t]) ^ rows[1][t]) ^ rows[2][t]);
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
  for (uint32_t p = 0; dst != nullptr && p < layout_.planes; ++p)
    copyRest(dst + p * planeBytes, src + p * planeBytes, uint64_t{fill} * length);
  finishCopy(dst);
  return crc;
}

void BlockChecksum::copyRest(uint8_t* plane, const uint8_t* source, uint64_t from) const {
  // The same stores as the summing copy's, so that verified and unverified moves differ by the sum alone.
  streamCopy(plane + from, source + from, layout_.planeBytes - from);
}

void BlockChecksum::finishCopy(uint8_t* dst) {
  if (dst != nullptr) streamFence();  // streamed stores reach other threads only after a fence
}

}  // namespace kvfabric
