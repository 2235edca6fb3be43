// Crc32 against zlib's crc32 (the definition) on every length up to 300
// bytes, at every alignment, continuing a prior CRC, in pieces, and on 8 MiB.
#include "common/crc32.h"

#include <zlib.h>

#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace frameworm {
namespace {

uint32_t Zlib(uint32_t crc, const unsigned char* p, size_t n) {
  return static_cast<uint32_t>(crc32(crc, p, static_cast<uInt>(n)));
}

std::vector<unsigned char> RandomBytes(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::vector<unsigned char> v(n);
  for (auto& b : v) b = static_cast<unsigned char>(gen());
  return v;
}

TEST(Crc32Test, KnownValues) {
  EXPECT_EQ(Crc32(0, "", 0), 0u);
  EXPECT_EQ(Crc32(0, "123456789", 9), 0xcbf43926u);  // the CRC-32 check value
  // 64 bytes and more take the folding path.
  const std::string a(1000, 'a');
  EXPECT_EQ(Crc32(0, a.data(), a.size()),
            Zlib(0, reinterpret_cast<const unsigned char*>(a.data()), a.size()));
}

TEST(Crc32Test, EqualsZlibAtEveryLengthAndAlignment) {
  const std::vector<unsigned char> buf = RandomBytes(400, 1);
  for (size_t off = 0; off < 16; ++off) {
    for (size_t n = 0; n + off <= 316; ++n) {
      for (uint32_t init : {0u, 0xffffffffu, 0x12345678u}) {
        ASSERT_EQ(Crc32(init, buf.data() + off, n), Zlib(init, buf.data() + off, n))
            << "offset " << off << " length " << n << " init " << init;
      }
    }
  }
}

TEST(Crc32Test, EqualsZlibOnLargeInputsAndInPieces) {
  const std::vector<unsigned char> buf = RandomBytes(8 << 20, 2);
  const uint32_t want = Zlib(0, buf.data(), buf.size());
  EXPECT_EQ(Crc32(0, buf.data(), buf.size()), want);
  // Continued over uneven pieces, as chunks arrive.
  std::mt19937 gen(3);
  uint32_t crc = 0;
  for (size_t done = 0; done < buf.size();) {
    const size_t k = std::min<size_t>(buf.size() - done, gen() % 300000);
    crc = Crc32(crc, buf.data() + done, k);
    done += k;
  }
  EXPECT_EQ(crc, want);
  // One flipped bit changes it.
  std::vector<unsigned char> flipped = buf;
  flipped[5 << 20] ^= 0x10;
  EXPECT_NE(Crc32(0, flipped.data(), flipped.size()), want);
}

}  // namespace
}  // namespace frameworm

namespace frameworm {
namespace {

// Ranges checksummed apart (as a fetch in several streams does) combine to
// the CRC of the whole, at every split point of a small input and at a few
// of a large one.
TEST(Crc32Test, RangesCombineToTheWhole) {
  std::string data(3 * 1024 * 1024 + 77, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 2654435761u >> 13);
  const uint32_t whole = Crc32(0, data.data(), data.size());
  for (size_t cut : {size_t{0}, size_t{1}, size_t{63}, size_t{1} << 20, data.size() - 5, data.size()}) {
    const uint32_t a = Crc32(0, data.data(), cut);
    const uint32_t b = Crc32(0, data.data() + cut, data.size() - cut);
    EXPECT_EQ(Crc32Combine(a, b, static_cast<int64_t>(data.size() - cut)), whole) << cut;
  }
  // Three ranges, joined left to right.
  const size_t c1 = 1000003, c2 = 2000029;
  uint32_t joined = Crc32(0, data.data(), c1);
  joined = Crc32Combine(joined, Crc32(0, data.data() + c1, c2 - c1), c2 - c1);
  joined = Crc32Combine(joined, Crc32(0, data.data() + c2, data.size() - c2), data.size() - c2);
  EXPECT_EQ(joined, whole);
}

}  // namespace
}  // namespace frameworm
