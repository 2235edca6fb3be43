// A byte count for people: "512 B", "1.5 KiB", "64.0 MiB" (B below 1 KiB,
// KiB below 1 MiB, else MiB with one decimal).
#ifndef FRAMEWORM_COMMON_BYTE_SIZE_H_
#define FRAMEWORM_COMMON_BYTE_SIZE_H_

#include <cstdint>
#include <string>

namespace frameworm {

std::string ByteSize(int64_t bytes);

}  // namespace frameworm

#endif  // FRAMEWORM_COMMON_BYTE_SIZE_H_
