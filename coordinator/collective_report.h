// A liveness ping's flight recorder (v1::CollectiveProgress) checked and
// turned into the domain's RankCollectives (coordinator/collective_view.h).
//
// Bounds (anything else is INVALID_ARGUMENT naming the field): 0 <=
// completed <= enqueued <= 2^62; at most 16 records, sequence numbers
// strictly increasing within [1, enqueued]; op and what 1 to 32 printable
// ASCII characters; state one of enqueued, started, completed, failed;
// bucket in [-1, 2^20]; bytes in [0, 2^50]; age_seconds and seconds finite,
// in [0, 10^7].
// Thread safety: free functions on values.
#ifndef FRAMEWORM_COORDINATOR_COLLECTIVE_REPORT_H_
#define FRAMEWORM_COORDINATOR_COLLECTIVE_REPORT_H_

#include "absl/status/status.h"
#include "coordinator/collective_view.h"
#include "frameworm/v1/common.pb.h"

namespace frameworm::coordinator {

absl::Status CheckCollectiveProgress(const v1::CollectiveProgress& c);
// Call after CheckCollectiveProgress; `at` is left for the caller.
RankCollectives ToRankCollectives(const v1::CollectiveProgress& c);
// Back to the proto, for JobService.DebugJob.
v1::CollectiveProgress ToCollectiveProgress(const RankCollectives& r);

}  // namespace frameworm::coordinator

#endif  // FRAMEWORM_COORDINATOR_COLLECTIVE_REPORT_H_
