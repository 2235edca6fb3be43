// CRC-32 as zlib's crc32() computes it (the gzip/PNG polynomial, the
// "crc32:xxxxxxxx" of every checkpoint, what Python's zlib.crc32 gives),
// several times faster on x86-64 CPUs with carry-less multiplication
// (PCLMULQDQ): 64-byte blocks are folded four lanes at a time, the folded
// 16 bytes and any tail finish in zlib. Other CPUs, and inputs under 64
// bytes, use zlib throughout. The result is the same bit for bit either way.
//
// Crc32(crc, data, n) continues `crc` (0 to start) over data[0, n), like
// crc32(crc, data, n). Thread-safe; no allocation.
#ifndef FRAMEWORM_COMMON_CRC32_H_
#define FRAMEWORM_COMMON_CRC32_H_

#include <cstddef>
#include <cstdint>

namespace frameworm {

uint32_t Crc32(uint32_t crc, const void* data, size_t n);

// The CRC-32 of A followed by B from crc1 = CRC of A, crc2 = CRC of B and
// B's length (zlib's crc32_combine): how ranges checksummed apart join.
uint32_t Crc32Combine(uint32_t crc1, uint32_t crc2, int64_t len2);

// Whether Crc32 folds with PCLMULQDQ on this CPU (for benchmarks' notes).
bool Crc32IsAccelerated();

}  // namespace frameworm

#endif  // FRAMEWORM_COMMON_CRC32_H_
