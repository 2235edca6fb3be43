// Room on a filesystem for a file this process is about to receive (a
// checkpoint copy uploaded to the coordinator, or fetched by a worker from
// a peer). A size announced by the sender is checked against the free
// space before any byte is written, so a claimed copy larger than the disk
// (a sparse file of a TiB, a hostile size) is refused up front instead of
// filling the disk the daemon, the job's trainers and SQLite share; and
// transfers in flight at once cannot overcommit it between them.
//
// Take(dir, bytes): OK when the free space (statvfs f_bavail) of the
// filesystem holding `dir` covers `bytes`, what this process's other
// reservations there still hold, and a margin kept free, min(1 GiB, 5% of
// that filesystem, unless told otherwise). RESOURCE_EXHAUSTED names the
// numbers. A filesystem that cannot be asked (statvfs fails) or reports no
// size (a tmpfs with size=0) is not checked. The reservations are this
// process's: two daemons on one host do not see each other's. Used(n) says n bytes were
// written (they now count in the free space itself); destroying the
// reservation releases what was not used.
//
// Thread safety: every method from any thread (one process-wide mutex).
#ifndef FRAMEWORM_COMMON_DISK_RESERVATION_H_
#define FRAMEWORM_COMMON_DISK_RESERVATION_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace frameworm {

class DiskReservation {
 public:
  // `what` names the file in the error ("ckpt-7.pt"); `keep_free` < 0:
  // KeptFree's margin.
  static absl::StatusOr<std::unique_ptr<DiskReservation>> Take(const std::string& dir,
                                                               int64_t bytes,
                                                               const std::string& what,
                                                               int64_t keep_free = -1);
  ~DiskReservation();
  DiskReservation(const DiskReservation&) = delete;
  DiskReservation& operator=(const DiskReservation&) = delete;

  void Used(int64_t bytes);
  // What this process holds reserved on the filesystem of `dir` (tests).
  static int64_t HeldOn(const std::string& dir);
  // The margin kept free on a filesystem of `size_bytes`.
  static int64_t KeptFree(int64_t size_bytes);

 private:
  DiskReservation(dev_t dev, int64_t bytes) : dev_(dev), left_(bytes) {}
  const dev_t dev_;
  int64_t left_;  // guarded by the process-wide mutex
};

}  // namespace frameworm

#endif  // FRAMEWORM_COMMON_DISK_RESERVATION_H_
