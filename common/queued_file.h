// A ReceivedFile (common/received_file.h) written by its own thread, so a
// receiver reads and decrypts the next chunk while the previous one is
// written and checksummed (a checkpoint copy between workers).
//
// Append hands a chunk over (it blocks while `max_queued` chunks wait, so
// memory stays within max_queued * kMaxChunkBytes); the thread appends them
// in order. The first error the file returns (a refused chunk, a disk
// error) comes back from the next Append or from Commit, and later chunks
// are dropped. Commit waits until every chunk is written, then checks and
// renames as ReceivedFile::Commit does. Destroying it before Commit stops
// the thread and removes the partial file.
// Thread safety: one caller thread (Append, Commit); the writer is internal.
#ifndef FRAMEWORM_COMMON_QUEUED_FILE_H_
#define FRAMEWORM_COMMON_QUEUED_FILE_H_

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/received_file.h"

namespace frameworm {

class QueuedFile {
 public:
  // As ReceivedFile::Create; max_queued >= 1.
  static absl::StatusOr<std::unique_ptr<QueuedFile>> Create(const std::string& path,
                                                            int64_t expected_bytes,
                                                            size_t max_queued = 4);
  ~QueuedFile();
  QueuedFile(const QueuedFile&) = delete;
  QueuedFile& operator=(const QueuedFile&) = delete;

  // Takes `data` (moved from); the writer's first error, if any.
  absl::Status Append(std::string&& data);
  // An empty string holding the buffer of a chunk already written, when
  // there is one (swap it into the next message to reuse its memory).
  std::string Spare();
  // Waits for the queue to drain, then ReceivedFile::Commit(checksum).
  absl::Status Commit(const std::string& checksum);

 private:
  QueuedFile(std::unique_ptr<ReceivedFile> file, size_t max_queued);
  void Run();
  absl::Status Drain();

  std::unique_ptr<ReceivedFile> file_;
  const size_t max_queued_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> queue_;  // guarded by mu_
  std::deque<std::string> spare_;  // written chunks' buffers, at most max_queued_ (mu_)
  bool writing_ = false;           // a chunk is being appended (mu_)
  bool closing_ = false;           // mu_
  absl::Status error_;             // the first append error (mu_)
  std::thread thread_;             // last: starts after the rest exists
};

}  // namespace frameworm

#endif  // FRAMEWORM_COMMON_QUEUED_FILE_H_
