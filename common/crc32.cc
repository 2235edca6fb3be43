#include "common/crc32.h"

#include <zlib.h>

#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace frameworm {
namespace {

// zlib's crc32 takes uInt lengths: feed it in pieces that fit.
uint32_t ZlibCrc(uint32_t crc, const unsigned char* p, size_t n) {
  while (n > 0) {
    const size_t k = n > (1u << 30) ? (1u << 30) : n;
    crc = static_cast<uint32_t>(crc32(crc, p, static_cast<uInt>(k)));
    p += k;
    n -= k;
  }
  return crc;
}

#if defined(__x86_64__)

// Folding constants for the bit-reflected polynomial 0xEDB88320: x^(4*128+32)
// and x^(4*128-32) mod P for folding across four lanes, x^(128+32) and
// x^(128-32) mod P for folding one 16-byte block into the next (Intel's
// "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ").
constexpr long long kFold4Lo = 0x154442bd4, kFold4Hi = 0x1c6e41596;
constexpr long long kFold1Lo = 0x1751997d0, kFold1Hi = 0x0ccaa009e;

__attribute__((target("pclmul,sse4.1"))) inline __m128i Fold(__m128i x, __m128i k, __m128i next) {
  return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00),
                                     _mm_clmulepi64_si128(x, k, 0x11)),
                       next);
}

__attribute__((target("pclmul,sse4.1"))) inline __m128i Load(const unsigned char* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}

// n >= 64. The folded 16 bytes carry the same remainder as everything
// folded into them, so their CRC from a zero register (zlib's crc32 started
// at 0xffffffff) is the register after the whole prefix.
__attribute__((target("pclmul,sse4.1"))) uint32_t FoldedCrc(uint32_t crc, const unsigned char* p,
                                                            size_t n) {
  const __m128i k4 = _mm_set_epi64x(kFold4Hi, kFold4Lo);
  const __m128i k1 = _mm_set_epi64x(kFold1Hi, kFold1Lo);
  __m128i x0 = _mm_xor_si128(Load(p), _mm_cvtsi32_si128(static_cast<int>(~crc)));
  __m128i x1 = Load(p + 16), x2 = Load(p + 32), x3 = Load(p + 48);
  p += 64;
  n -= 64;
  for (; n >= 64; p += 64, n -= 64) {
    x0 = Fold(x0, k4, Load(p));
    x1 = Fold(x1, k4, Load(p + 16));
    x2 = Fold(x2, k4, Load(p + 32));
    x3 = Fold(x3, k4, Load(p + 48));
  }
  __m128i x = Fold(Fold(Fold(x0, k1, x1), k1, x2), k1, x3);
  for (; n >= 16; p += 16, n -= 16) x = Fold(x, k1, Load(p));
  alignas(16) unsigned char folded[16];
  _mm_store_si128(reinterpret_cast<__m128i*>(folded), x);
  return ZlibCrc(ZlibCrc(0xffffffffu, folded, sizeof folded), p, n);
}

bool HavePclmul() {
  static const bool have = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
  return have;
}

#endif

}  // namespace

uint32_t Crc32(uint32_t crc, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
#if defined(__x86_64__)
  if (n >= 64 && HavePclmul()) return FoldedCrc(crc, p, n);
#endif
  return ZlibCrc(crc, p, n);
}

bool Crc32IsAccelerated() {
#if defined(__x86_64__)
  return HavePclmul();
#else
  return false;
#endif
}

uint32_t Crc32Combine(uint32_t crc1, uint32_t crc2, int64_t len2) {
  return static_cast<uint32_t>(crc32_combine64(crc1, crc2, static_cast<z_off64_t>(len2)));
}

}  // namespace frameworm
