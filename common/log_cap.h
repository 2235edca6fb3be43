// Bounded log files whose offsets stay valid: a log that holds more than
// `max_bytes` of data loses its oldest bytes to a punched hole
// (fallocate PUNCH_HOLE | KEEP_SIZE, in whole 64 KiB blocks), so the file's
// length and every offset into it stay what they were while the disk space
// is given back. Readers skip the hole with FirstKept. A writer may keep
// appending (O_APPEND) while a file is capped.
//
// Supported where the filesystem punches holes (ext4, xfs, btrfs, tmpfs);
// elsewhere CapLog returns UNIMPLEMENTED and the file is left whole.
// Thread safety: stateless; concurrent calls on one file may punch twice
// (harmless).
// Errors: INTERNAL naming the file and errno for I/O errors; UNIMPLEMENTED
// as above.
#ifndef FRAMEWORM_COMMON_LOG_CAP_H_
#define FRAMEWORM_COMMON_LOG_CAP_H_

#include <climits>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace frameworm {

inline constexpr int64_t kLogCapBlock = 64 << 10;

// When the file at `path` holds over `max_bytes` (> 0) of data after its
// first kept byte, drops the head so that at most about max_bytes / 2
// remain, but nothing at or after `keep_from` (a reader's position whose
// data must not be lost). Returns the offset of the first byte kept (0:
// nothing dropped ever; the file's size for a file whose data was all
// dropped).
absl::StatusOr<int64_t> CapLog(const std::string& path, int64_t max_bytes,
                               int64_t keep_from = INT64_MAX);

// The first offset >= `offset` of `fd` that holds data (not a punched
// hole); the file's size when none does.
int64_t FirstKept(int fd, int64_t offset);

}  // namespace frameworm

#endif  // FRAMEWORM_COMMON_LOG_CAP_H_
