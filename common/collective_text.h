// How a collective is named in logs and reasons, the same in the trainer
// (train/flight_recorder.h) and the coordinator (coordinator/
// collective_view.h): "#41 allreduce gradients bucket 0 (1.2 MiB)"; the
// bucket is left out when negative; sizes in B, KiB or MiB.
// Thread safety: a pure function.
#ifndef FRAMEWORM_COMMON_COLLECTIVE_TEXT_H_
#define FRAMEWORM_COMMON_COLLECTIVE_TEXT_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace frameworm {

std::string CollectiveText(int64_t seq, absl::string_view op, absl::string_view what, int bucket,
                           int64_t bytes);

}  // namespace frameworm

#endif  // FRAMEWORM_COMMON_COLLECTIVE_TEXT_H_
