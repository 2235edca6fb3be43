// Durable, checksummed checkpoint files (no LibTorch: the payload is opaque).
//
// Layout: a 24-byte header {magic "FWCKPT01", uint64 payload length,
// uint32 crc32 of the payload, uint32 zero} in little-endian, then the
// payload. WriteCheckpointFile writes a temporary file in the same
// directory, fsyncs it, renames it over `path` and fsyncs the directory, so
// a reader sees either the old file or the complete new one.
// ReadCheckpointFile verifies magic, length and checksum before returning
// any byte of the payload.
//
// Thread safety: free functions; concurrent writers to one path are not
// supported.
#ifndef FRAMEWORM_TRAIN_CHECKPOINT_FILE_H_
#define FRAMEWORM_TRAIN_CHECKPOINT_FILE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace frameworm {

struct CheckpointFileInfo {
  int64_t bytes = 0;      // whole file
  std::string checksum;   // "crc32:xxxxxxxx" over the payload
};

// Errors: UNAVAILABLE/INTERNAL naming the path and the failed system call.
absl::StatusOr<CheckpointFileInfo> WriteCheckpointFile(
    const std::string& path, const std::string& payload);

// Errors: NOT_FOUND (missing file); DATA_LOSS naming the path and what is
// wrong (truncated header, bad magic, truncated/extra payload, checksum
// mismatch).
absl::StatusOr<std::string> ReadCheckpointFile(const std::string& path);

}  // namespace frameworm

#endif  // FRAMEWORM_TRAIN_CHECKPOINT_FILE_H_
