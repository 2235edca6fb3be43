#include "common/disk_reservation.h"

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <cstdint>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace frameworm {
namespace {

absl::Mutex& Mu() {
  static absl::Mutex* mu = new absl::Mutex;  // never destroyed
  return *mu;
}
// Bytes reserved and not yet written, per filesystem (device).
std::map<dev_t, int64_t>& Held() ABSL_EXCLUSIVE_LOCKS_REQUIRED(Mu()) {
  static auto* held = new std::map<dev_t, int64_t>;  // never destroyed
  return *held;
}

// n blocks of `unit` bytes, saturated at INT64_MAX.
int64_t Bytes(uint64_t n, uint64_t unit) {
  if (unit != 0 && n > static_cast<uint64_t>(INT64_MAX) / unit) return INT64_MAX;
  return static_cast<int64_t>(n * unit);
}

}  // namespace

int64_t DiskReservation::KeptFree(int64_t size_bytes) {
  return std::min<int64_t>(int64_t{1} << 30, size_bytes / 20);
}

absl::StatusOr<std::unique_ptr<DiskReservation>> DiskReservation::Take(const std::string& dir,
                                                                       int64_t bytes,
                                                                       const std::string& what,
                                                                       int64_t keep_free) {
  struct stat st {};
  struct statvfs fs {};
  // A filesystem that cannot be asked, or that reports no size (a tmpfs
  // mounted with size=0, unbounded), is not checked.
  if (::stat(dir.c_str(), &st) != 0 || ::statvfs(dir.c_str(), &fs) != 0 || fs.f_blocks == 0) {
    return std::unique_ptr<DiskReservation>(new DiskReservation(0, 0));
  }
  const int64_t free = Bytes(fs.f_bavail, fs.f_frsize);
  const int64_t keep = keep_free >= 0 ? keep_free : KeptFree(Bytes(fs.f_blocks, fs.f_frsize));
  absl::MutexLock l(&Mu());
  auto it = Held().find(st.st_dev);
  const int64_t held = it == Held().end() ? 0 : it->second;
  // free - held - keep, without overflow for any announced size.
  const int64_t room = std::max<int64_t>(0, free - std::min(free, held) - std::min(free, keep));
  if (bytes > room) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "no room for ", what, " (", bytes, " bytes) on the filesystem of ", dir, ": ", free,
        " bytes free, ", held, " of them reserved for transfers in flight, ", keep,
        " kept free"));
  }
  Held()[st.st_dev] += bytes;
  return std::unique_ptr<DiskReservation>(new DiskReservation(st.st_dev, bytes));
}

void DiskReservation::Used(int64_t bytes) {
  absl::MutexLock l(&Mu());
  const int64_t n = std::min(std::max<int64_t>(0, bytes), left_);
  if (n == 0) return;
  left_ -= n;
  Held()[dev_] -= n;
}

DiskReservation::~DiskReservation() {
  absl::MutexLock l(&Mu());
  if (left_ == 0) return;
  auto it = Held().find(dev_);
  if (it == Held().end()) return;
  it->second -= left_;
  if (it->second <= 0) Held().erase(it);
}

int64_t DiskReservation::HeldOn(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return 0;
  absl::MutexLock l(&Mu());
  auto it = Held().find(st.st_dev);
  return it == Held().end() ? 0 : it->second;
}

}  // namespace frameworm
