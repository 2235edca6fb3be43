// The checkpoints this worker holds and serves to its peers
// (peer_service.proto), as the coordinator told it (HoldCheckpoint).
// Plain data: no gRPC types; the agent fills it, the peer server reads it.
//
// A held checkpoint is a file at `path` = "<dir>/ckpt-<step>.pt": absolute,
// with no "." or ".." component (an empty one, "//", is harmless) and named
// for its step, so a hold cannot make this worker serve or delete any other
// file. Limits: kMaxHeldCheckpoints in all (Add refuses more), paths of at
// most 4096 bytes, sizes in [0, 1 TiB], checksums "crc32:" + 8 hex digits,
// at most 8 sources of at most 256 bytes each.
//
// Thread safety: every member is thread-safe (one mutex).
// Errors: Check/Add: INVALID_ARGUMENT naming the field; Add:
// RESOURCE_EXHAUSTED when full.
#ifndef FRAMEWORM_WORKER_CHECKPOINT_HOLDINGS_H_
#define FRAMEWORM_WORKER_CHECKPOINT_HOLDINGS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace frameworm {

inline constexpr size_t kMaxHeldCheckpoints = 1024;

struct HeldCheckpoint {
  std::string job_id;
  int64_t step = 0;
  std::string path;
  int64_t bytes = 0;
  std::string checksum;
  std::vector<std::string> sources;  // where to fetch it; empty: already here
  // This worker wrote the file (fetched it): a job-wide drop deletes only
  // such copies, never what a rank wrote or a shared filesystem holds.
  bool copied = false;
  std::string secret;  // required from a peer that fetches it
  uint64_t fetch_id = 0;  // the agent's note of a fetch (FetchJournal); 0: none
};

// OK when `h` may be held (the rules above).
absl::Status CheckHold(const HeldCheckpoint& h);

class CheckpointHoldings {
 public:
  // Holds `h` (replacing a hold of the same job and step).
  absl::Status Add(const HeldCheckpoint& h);
  std::optional<HeldCheckpoint> Find(const std::string& job_id, int64_t step) const;
  // Stops holding the job's checkpoint of `step` (-1: every step) and
  // returns what was held; the caller deletes the files (for step -1 only
  // the copied ones).
  std::vector<HeldCheckpoint> Remove(const std::string& job_id, int64_t step);
  size_t size() const;
  // Everything held, by job and step.
  std::vector<HeldCheckpoint> All() const;

 private:
  mutable absl::Mutex mu_;
  std::map<std::pair<std::string, int64_t>, HeldCheckpoint> held_ ABSL_GUARDED_BY(mu_);
};

}  // namespace frameworm

#endif  // FRAMEWORM_WORKER_CHECKPOINT_HOLDINGS_H_
