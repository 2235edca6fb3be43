// One coordinator per state directory: an exclusive flock(2) on
// <state_dir>/coordinator.lock, held for the life of the object (the kernel
// drops it when the process dies, however it dies). The file holds the
// holder's pid, for the error message of the next one.
//
// Thread safety: immutable after Acquire.
#ifndef FRAMEWORM_COORDINATOR_STATE_DIR_LOCK_H_
#define FRAMEWORM_COORDINATOR_STATE_DIR_LOCK_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace frameworm::coordinator {

class StateDirLock {
 public:
  // FAILED_PRECONDITION when another process (or another StateDirLock in
  // this one) holds `dir`, naming the directory and the holder's pid;
  // UNAVAILABLE when the lock file cannot be opened.
  static absl::StatusOr<std::unique_ptr<StateDirLock>> Acquire(const std::string& dir);
  ~StateDirLock();
  StateDirLock(const StateDirLock&) = delete;
  StateDirLock& operator=(const StateDirLock&) = delete;

 private:
  explicit StateDirLock(int fd) : fd_(fd) {}
  const int fd_;
};

}  // namespace frameworm::coordinator

#endif  // FRAMEWORM_COORDINATOR_STATE_DIR_LOCK_H_
