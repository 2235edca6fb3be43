// A file that arrives in chunks over the network (a checkpoint copy) and
// becomes visible only once it is whole and its checksum matched: bytes go
// to "<path>.partial-<PartialTag()>-<n>" (created new, never through an
// existing file),
// Commit checks the size and the CRC-32, fsyncs, renames it over `path` and
// fsyncs the directory. Destroying it before Commit removes the partial file.
//
// Also here: the checksum text every checkpoint carries and the rule for a
// job id used as one path component, shared by the coordinator's copies
// (coordinator/checkpoint_copies.h) and the workers' (worker/checkpoint_holdings.h).
//
// Limits: `expected_bytes` is declared up front; more bytes, a chunk over
// kMaxChunkBytes, a short file or another checksum are refused, and so is
// a size its filesystem has no room for (RESOURCE_EXHAUSTED, before any
// byte is written: common/disk_reservation.h).
// Errors: INVALID_ARGUMENT (naming the numbers), INTERNAL for filesystem
// errors (naming the file), FAILED_PRECONDITION after the end.
//
// Ranges: a file fetched in several streams at once is written with WriteAt
// (disjoint ranges, in any order, from any threads) and committed with
// CommitRanges, given the CRC-32 of all its bytes (the caller combines its
// ranges'); a file is written either way, never both.
// Thread safety: one ReceivedFile is used by one thread at a time, except
// that WriteAt may be called from several threads at once.
#ifndef FRAMEWORM_COMMON_RECEIVED_FILE_H_
#define FRAMEWORM_COMMON_RECEIVED_FILE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace frameworm {

class DiskReservation;

inline constexpr int64_t kMaxChunkBytes = 1 << 20;

// "crc32:xxxxxxxx" for zlib's crc32 `crc`.
std::string Crc32Text(uint32_t crc);
// True when `text` has that form ("crc32:" and 8 lower-case hex digits).
bool IsCrc32Text(const std::string& text);
// `crc` (zlib's crc32) continued over `data`.
uint32_t UpdateCrc32(uint32_t crc, const std::string& data);

// True when the file at `path` has exactly `bytes` bytes whose CRC-32 text
// is `checksum` (a copy already in place: a shared filesystem, or this
// node wrote it). Reads the whole file; false on any error, and for
// anything but a regular file (a final symlink is not followed, a FIFO
// is never waited on).
bool FileMatches(const std::string& path, int64_t bytes, const std::string& checksum);
// The size and CRC-32 text of the regular file at `path` (reads all of it;
// a FIFO or device is refused, not waited on).
// Errors: NOT_FOUND (cannot open, or not a regular file), INTERNAL (a read
// failed).
absl::StatusOr<std::pair<int64_t, std::string>> FileChecksum(const std::string& path);

// "<pid>.<8 random hex digits>", the same for the whole process: names
// this process's partial files, telling them from those of another process
// even one with the same pid (another container sharing the directory).
const std::string& PartialTag();

// OK when `job_id` is safe as one path component: 1-64 characters of
// [A-Za-z0-9_.-], not "." or "..".
absl::Status CheckJobIdComponent(const std::string& job_id);

class ReceivedFile {
 public:
  // Creates the parent directory of `path` if needed (none: the working
  // directory) and the partial file, once its disk has room for
  // `expected_bytes` with `keep_free` bytes left (-1: the daemons' margin,
  // DiskReservation::KeptFree; a user's download keeps 0).
  static absl::StatusOr<std::unique_ptr<ReceivedFile>> Create(const std::string& path,
                                                              int64_t expected_bytes,
                                                              int64_t keep_free = -1);
  ~ReceivedFile();
  absl::Status Append(const std::string& data);
  // Checks the size and `checksum` ("crc32:xxxxxxxx"), then renames the file
  // into place (replacing an older file of the same name).
  absl::Status Commit(const std::string& checksum);
  // Writes data[0, n) at `offset` (n <= kMaxChunkBytes, inside the
  // declared size). The caller keeps ranges disjoint.
  absl::Status WriteAt(int64_t offset, const char* data, size_t n);
  // Commit for a file written with WriteAt: every declared byte written,
  // `crc` (of all of them, in order) matching `checksum`.
  absl::Status CommitRanges(uint32_t crc, const std::string& checksum);
  int64_t received() const { return received_; }
  // The CRC-32 (zlib's) of the bytes Append wrote so far.
  uint32_t crc() const { return crc_; }
  int64_t expected() const { return expected_; }

 private:
  ReceivedFile() = default;
  // Checks `written` bytes and `crc` against what was declared, then fsyncs
  // and renames.
  absl::Status Finish(int64_t written, uint32_t crc, const std::string& checksum);
  int fd_ = -1;
  std::unique_ptr<DiskReservation> room_;  // the declared size's room on the disk
  std::atomic<int64_t> written_at_{0};  // bytes WriteAt wrote
  std::string partial_, final_;
  int64_t expected_ = 0, received_ = 0;
  uint32_t crc_ = 0;
  bool committed_ = false;
};

}  // namespace frameworm

#endif  // FRAMEWORM_COMMON_RECEIVED_FILE_H_
