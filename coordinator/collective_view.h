// The ranks' collective flight recorders as the coordinator last heard
// them (liveness pings), and what comparing them says about a stall.
//
// Sequence number s names the same collective on every rank of a
// generation (c10d issues them in the same order everywhere;
// train/flight_recorder.h). A collective completes only once every rank
// has entered it, so when ranks wait, the oldest collective a waiting rank
// has not completed, s*, is what they wait in. Collectives complete in
// order, so s* is one past the highest number any rank completed (a rank's
// own record may be older: a stopped rank's last ping stays), and a rank
// whose highest issued number is below s* never reached it (as of its
// last ping): that rank is the one behind.
// When every rank entered s* and none completed it, nobody is behind (a
// rank stopped inside it, or the network between them); when the ranks'
// records of s* differ in op, payload or size, their programs issue
// different collectives (desynchronized), which no one can finish.
//
// Domain types only (no gRPC); the report's fields are checked where it is
// received (coordinator/collective_report.h). Not thread-safe; values.
#ifndef FRAMEWORM_COORDINATOR_COLLECTIVE_VIEW_H_
#define FRAMEWORM_COORDINATOR_COLLECTIVE_VIEW_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace frameworm::coordinator {

struct CollectiveOpView {
  int64_t seq = 0;
  std::string op;    // "allreduce", ...
  std::string what;  // "gradients", ...
  int bucket = -1;
  int64_t bytes = 0;
  std::string state;         // "enqueued" | "started" | "completed" | "failed"
  double age_seconds = 0;    // since enqueued, at the ping
  double seconds = 0;        // enqueued to ended; 0 while pending
};

struct RankCollectives {
  int64_t enqueued = 0;
  int64_t completed = 0;
  std::vector<CollectiveOpView> recent;  // oldest first
  absl::Time at;                         // when the ping came
  // The record of `seq`, if kept.
  const CollectiveOpView* Find(int64_t seq) const;
};

// "#41 allreduce gradients bucket 0 (1.2 MiB)".
std::string DescribeCollective(const CollectiveOpView& op);

struct CollectiveVerdict {
  int64_t seq = 0;           // s*: what the waiting ranks wait in
  std::vector<int> behind;   // ranks that never reached it (ascending)
  bool desynchronized = false;
  std::string text;          // one sentence for the abort reason
};

// `ranks[i]`: rank i's latest recorder, null when it sent none (or is
// done). nullopt when fewer than two ranks sent one or no rank waits in a
// collective. Times in the text count to `now`.
std::optional<CollectiveVerdict> CompareCollectives(
    const std::vector<const RankCollectives*>& ranks, absl::Time now);

}  // namespace frameworm::coordinator

#endif  // FRAMEWORM_COORDINATOR_COLLECTIVE_VIEW_H_
