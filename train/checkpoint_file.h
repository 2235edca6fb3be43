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
// CheckpointFileWriter streams a payload of unknown length into the same
// layout (the header is written last, before the fsync), so a serializer
// can write straight to the file without a copy of the whole payload in
// memory. Append checksums and copies into 8 MiB buffers; a writer thread
// of its own writes full buffers (at most 3 waiting, then Append waits), so
// serializing and checksumming overlap the write system calls. Where the
// filesystem takes O_DIRECT, the buffers (4 KiB aligned, each at a file
// offset that is a multiple of 8 MiB: the first one starts with the header's
// place) go to the disk without a copy into the page cache; the last
// buffer's unaligned tail and the header are written through the page cache
// and the fsync covers both. A filesystem that refuses O_DIRECT at open
// (ramfs, tmpfs before Linux 6.6, many FUSE filesystems) gets buffered
// writes only.
// WriteCheckpointFile is Open + Append + Commit.
//
// RemoveStaleCheckpointTemps deletes the temporary files of writers that
// died mid-write (their pid is gone) directly in a directory:
// `<name>.tmp.<pid>` (a save), `<name>.download-<pid>` (a copy fetched from
// the coordinator), `<name>.refetch-<pid>` (a damaged file's replacement),
// `<name>.rank<r>-<pid>` (another rank's private copy of a resume file).
//
// Thread safety: free functions; a writer is used by one thread at a time;
// concurrent writers to one path are not supported.
#ifndef FRAMEWORM_TRAIN_CHECKPOINT_FILE_H_
#define FRAMEWORM_TRAIN_CHECKPOINT_FILE_H_

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace frameworm {

struct CheckpointFileInfo {
  int64_t bytes = 0;      // whole file
  // "crc32:xxxxxxxx" of the whole file (zlib's crc32 of every byte, as
  // `python3 -c 'import zlib,sys; print(zlib.crc32(open(sys.argv[1],"rb").read()))'`
  // gives); the header holds the payload's own CRC.
  std::string checksum;
};

class CheckpointFileWriter {
 public:
  // Creates `<path>.tmp.<pid>` (and missing parent directories). Errors as
  // WriteCheckpointFile.
  static absl::StatusOr<std::unique_ptr<CheckpointFileWriter>> Open(const std::string& path);
  // Removes the temporary file unless Commit succeeded.
  ~CheckpointFileWriter();
  CheckpointFileWriter(const CheckpointFileWriter&) = delete;
  CheckpointFileWriter& operator=(const CheckpointFileWriter&) = delete;

  // Appends payload bytes (buffered; written by the writer thread). After
  // an error every later call returns it (a write error may surface one
  // call late, and at Commit at the latest).
  absl::Status Append(const void* data, size_t n);
  // Writes the header, fsyncs, renames over the path, fsyncs the directory.
  // Afterwards the file is complete (or, on error, the old file is intact
  // and the temporary file is gone).
  absl::StatusOr<CheckpointFileInfo> Commit();
  // True when its full buffers go to the disk with O_DIRECT.
  bool direct_io() const { return direct_fd_ >= 0; }

 private:
  // A 4 KiB aligned block of kWriteBuffer bytes, `size` of them used,
  // bound for `offset` in the file.
  struct Buffer {
    std::unique_ptr<char, void (*)(void*)> data{nullptr, &std::free};
    size_t size = 0;
    uint64_t offset = 0;
  };
  CheckpointFileWriter(std::string path, std::string tmp, int fd, int direct_fd);
  // A spare buffer or a new one (nullptr data when memory ran out).
  Buffer TakeBuffer();
  // Hands buf_ to the writer thread (waits while 3 are queued); refill:
  // buf_ becomes a spare or new buffer (else it stays empty, for the end).
  absl::Status Submit(bool refill = true);
  // Submits what is buffered, waits for every write, stops the thread.
  absl::Status Drain();
  void WriterLoop();
  // Writes b: its aligned part through direct_fd_ while that works, the
  // rest through fd_.
  absl::Status WriteBuffer(const Buffer& b);
  const std::string path_, tmp_;
  int fd_;
  const int direct_fd_;  // the same file opened O_DIRECT, or -1
  Buffer buf_;     // being filled by Append
  uint64_t length_ = 0;
  unsigned long crc_;  // zlib's uLong
  absl::Status status_;  // Append's view of the first error
  bool committed_ = false;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Buffer> full_;    // guarded by mu_: to write, in order
  std::vector<Buffer> spare_;  // guarded by mu_: written, reusable
  bool closing_ = false;            // guarded by mu_
  absl::Status write_status_;       // guarded by mu_: the writer's first error
  std::thread writer_;
};

// Errors: UNAVAILABLE/INTERNAL naming the path and the failed system call;
// RESOURCE_EXHAUSTED for a full disk, a quota or a file-size limit.
absl::StatusOr<CheckpointFileInfo> WriteCheckpointFile(
    const std::string& path, const std::string& payload);

// Reads the header, then (only when the file's size matches it) exactly
// the payload, into the string returned.
// Errors: NOT_FOUND (missing file); INVALID_ARGUMENT for a path that is not
// a regular file (a device, a pipe); DATA_LOSS naming the path and what is
// wrong (truncated header, bad magic, truncated/extra payload, checksum
// mismatch).
absl::StatusOr<std::string> ReadCheckpointFile(const std::string& path);

// Returns how many were removed. Never follows a symlink, never recurses.
int RemoveStaleCheckpointTemps(const std::string& dir);

}  // namespace frameworm

#endif  // FRAMEWORM_TRAIN_CHECKPOINT_FILE_H_
