// The trainer program's view of the cluster service, in plain C++ types.
//
// frameworm-train reports progress and checkpoints through this interface;
// its LibTorch translation units never see gRPC or protobuf (LibTorch's
// include path carries a protobuf of its own; see docs/ARCHITECTURE.md).
// The gRPC implementation is trainer/trainer_channel.{h,cc}; when a trainer
// runs outside a cluster (no FRAMEWORM_COORDINATOR) it uses no channel.
//
// Thread safety: implementations must be safe to call from one thread at a
// time; the trainer calls them from its training thread only.
#ifndef FRAMEWORM_TRAINER_CONTROL_CHANNEL_H_
#define FRAMEWORM_TRAINER_CONTROL_CHANNEL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace frameworm {

struct StepReport {
  int rank = 0;
  int64_t step = 0;        // steps completed so far (1-based after a step)
  int epoch = 0;
  int64_t samples = 0;     // samples this rank processed in this step
  double step_seconds = 0;
  // Of step_seconds, blocked in gradient collectives; before it, fetching
  // data (StepInfo's). The coordinator's straggler rule compares the rest.
  double wait_seconds = 0;
  double data_seconds = 0;
  int64_t total_steps = 0;  // steps the run will make in all, 0 if unknown
  // A sign of life during work that makes no steps (evaluation,
  // checkpointing): `step` is the last completed step, no metrics.
  bool progress_only = false;
  // A ping from the trainer's liveness thread (with progress_only): says
  // the process lives and how long its training thread has been blocked
  // in the gradient collectives (0: it is not); never refreshes the hang
  // timer (the training thread may be stuck).
  bool ping = false;
  double waiting_seconds = 0;
  // With ping: the flight recorder's newest collectives (StepMetrics.
  // collectives; nullopt: no recorder, e.g. a single process).
  struct Collective {
    int64_t seq = 0;
    std::string op, what;
    int bucket = -1;
    int64_t bytes = 0;
    std::string state;
    double age_seconds = 0;
    double seconds = 0;
  };
  struct Collectives {
    int64_t enqueued = 0;
    int64_t completed = 0;
    std::vector<Collective> recent;  // oldest first, at most 16
  };
  std::optional<Collectives> collectives;
  std::map<std::string, double> values;  // "loss", "accuracy", ...
  // Shown in the job's status (StepMetrics.warning); empty: none.
  std::string warning;
  // Rank 0: the step of a disk checkpoint still being written or uploaded
  // (StepMetrics.checkpoint_in_flight), 0: none.
  int64_t checkpoint_in_flight = 0;
};

struct StepDirective {
  // Every rank checkpoints after completing this step (0: none pending).
  int64_t checkpoint_at_step = 0;
  bool stop = false;
};

struct CheckpointReport {
  int64_t step = 0;
  std::string path;
  int64_t bytes = 0;
  std::string checksum;  // hex digest as written in the checkpoint
  bool memory = false;   // an in-memory checkpoint (not uploaded)
};

// Whether a call's error says the coordinator is away (restarting, or the
// link down): UNAVAILABLE or DEADLINE_EXCEEDED. Such a call may be tried
// again (a report that did arrive counts once); other errors are answers.
inline bool CoordinatorAway(absl::StatusCode code) {
  return code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kDeadlineExceeded;
}

class ControlChannel {
 public:
  virtual ~ControlChannel() = default;
  // Errors: ABORTED when this trainer's generation is no longer current,
  // PERMISSION_DENIED when the coordinator knows its token no longer (a
  // generation more than 4 back, or before it restarted) or never did
  // (the trainer should exit on either), UNAVAILABLE when the coordinator
  // is away (the trainer keeps training and retries later).
  virtual absl::StatusOr<StepDirective> ReportStep(const StepReport& r) = 0;
  // Several reports, oldest first (TrainerService.ReportSteps: one call,
  // one commit); the directive is the newest report's. The first refused
  // report's error ends the batch (those before it are accepted). This
  // default sends them one by one.
  virtual absl::StatusOr<StepDirective> ReportSteps(const std::vector<StepReport>& batch) {
    StepDirective last;
    for (const StepReport& r : batch) {
      absl::StatusOr<StepDirective> d = ReportStep(r);
      if (!d.ok()) return d.status();
      last = *d;
    }
    return last;
  }
  // Retention: the expired paths of the job are returned (rank 0 deletes
  // those within its checkpoint directory).
  virtual absl::StatusOr<std::vector<std::string>> ReportCheckpoint(
      const CheckpointReport& r) = 0;
  // Sends the file at `path` (checkpoint of `step`) to the coordinator, which
  // keeps a copy for ranks on other hosts. Rank 0 calls it before
  // ReportCheckpoint. Errors: the coordinator's (INVALID_ARGUMENT for a
  // size or checksum it refuses), INTERNAL when the file cannot be read.
  virtual absl::Status UploadCheckpoint(int64_t step, const std::string& path) = 0;
  // Fetches the coordinator's copy of the checkpoint the job reported at
  // `path` and writes it to `dest` (atomically and durably: a partial file,
  // fsynced, renamed into place, its directory fsynced; parent directories
  // created). The size the first chunk announces is checked against the
  // disk's free space before any byte is written, and no byte past it is
  // written. NOT_FOUND when the coordinator holds no copy; DATA_LOSS when
  // what came is not the copy the record describes (fewer or more bytes
  // than announced, a negative size, a chunk over 1 MiB, or another CRC-32
  // than the record's, sent with the first chunk); RESOURCE_EXHAUSTED when
  // this host's disk has no room for the announced size; INTERNAL when
  // this host cannot write it (neither is DATA_LOSS: the copy is not at
  // fault).
  virtual absl::Status DownloadCheckpoint(const std::string& path, const std::string& dest) = 0;
  // No copy of `path` (FRAMEWORM_RESUME_FROM) loads: the coordinator drops
  // it, so the next generation resumes from the checkpoint before it.
  // coordinator_copy: only the coordinator's copy failed (its download was
  // DATA_LOSS; this host has none of its own): the coordinator removes a
  // copy it finds damaged and keeps the record while workers hold it
  // (returns true: the next generation fetches it from them);
  // FAILED_PRECONDITION when its copy matches the record. Returns whether
  // the record was kept.
  virtual absl::StatusOr<bool> ReportBadCheckpoint(const std::string& path,
                                                   const std::string& reason,
                                                   bool coordinator_copy) = 0;
};

}  // namespace frameworm

#endif  // FRAMEWORM_TRAINER_CONTROL_CHANNEL_H_
