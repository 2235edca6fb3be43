// gRPC implementation of ControlChannel (trainer/control_channel.h): a
// trainer process reports steps and checkpoints to the coordinator's
// TrainerService. This header includes no gRPC or protobuf header, so a
// LibTorch translation unit may include it.
//
// Reconnecting: a coordinator unreachable (UNAVAILABLE or a missed
// deadline) for over 2 s gets a fresh gRPC channel, at most once per 2 s:
// a restarted coordinator is found even when the old channel's connection
// attempts are stuck.
// Thread safety: the returned channel is used from one thread at a time.
#ifndef FRAMEWORM_TRAINER_TRAINER_CHANNEL_H_
#define FRAMEWORM_TRAINER_TRAINER_CHANNEL_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "trainer/control_channel.h"

namespace frameworm {

struct TrainerChannelOptions {
  std::string coordinator;  // "host:port" (FRAMEWORM_COORDINATOR)
  std::string job_id;       // FRAMEWORM_JOB_ID
  int64_t generation = 0;   // FRAMEWORM_GENERATION
  int rank = 0;             // RANK
  std::string token;        // FRAMEWORM_TOKEN (sent in every JobRef)
  std::string tls_dir;      // FRAMEWORM_TLS_DIR: TLS (rpc/tls.h LoadTrainerTlsDir); empty: plaintext
  // Per-call deadline: a slow or absent coordinator never stalls training
  // for longer than this (the call returns UNAVAILABLE/DEADLINE_EXCEEDED).
  absl::Duration call_timeout = absl::Milliseconds(500);
  // Deadline of a whole checkpoint upload or download.
  absl::Duration transfer_timeout = absl::Minutes(10);
  // > 0: NewTrainerChannel waits this long for a connection and fails with
  // UNAVAILABLE (naming the address) without one. 0: no wait; errors show
  // up on the calls.
  absl::Duration connect_timeout = absl::ZeroDuration();
};

// Errors: INVALID_ARGUMENT for an empty coordinator address or job id;
// UNAVAILABLE when options.connect_timeout > 0 and no connection was made.
absl::StatusOr<std::unique_ptr<ControlChannel>> NewTrainerChannel(
    const TrainerChannelOptions& options);

}  // namespace frameworm

#endif  // FRAMEWORM_TRAINER_TRAINER_CHANNEL_H_
