// One job as the coordinator keeps it: the spec, where it is in its
// lifecycle, and (while RUNNING) its current generation: the ranks, where
// they run, and what they reported. Plain data; the JobScheduler
// (job_scheduler.h) is the only one that changes it.
//
// Job: PENDING -> RUNNING -> (RESTARTING -> RUNNING)* -> SUCCEEDED | FAILED |
// CANCELLED. Each (re)start of a job's process group is a new generation.
//
// Thread safety: plain data, guarded by whoever owns the Job.
#ifndef FRAMEWORM_COORDINATOR_JOB_H_
#define FRAMEWORM_COORDINATOR_JOB_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/time/time.h"
#include "coordinator/generation_progress.h"
#include "coordinator/metrics.h"
#include "coordinator/store.h"
#include "frameworm/v1/common.pb.h"
#include "frameworm/v1/worker_service.pb.h"

namespace frameworm::coordinator {

// Where one rank of the current generation runs, and what it was told.
// (node_rank, local_rank and the rest of the rank environment are in
// `task`, proto/rank_env_proto.h RankEnvOf.)
struct RankState {
  std::string worker;
  v1::TaskSpec task;
  int64_t pid = 0;
};

struct Job {
  explicit Job(const MetricAggregator::Options& o) : metrics(o) {}
  std::string id;
  int64_t seq = 0;
  v1::JobSpec spec;  // normalized (jobspec/job_spec.h NormalizeJobSpec)
  v1::JobState state = v1::PENDING;
  int64_t generation = 0;
  int restarts = 0;
  // Restarts not counted against max_restarts because the coordinator's
  // own silence caused them (a rank fenced by its worker while current) or
  // a resume checkpoint without a usable copy (resume_failed_generation);
  // past JobScheduler::kMaxUncountedRestarts they count (in memory only).
  int uncounted_restarts = 0;
  // The generation whose resume checkpoint had no copy left, or whose
  // failure was the coordinator's damaged copy (ResumeFailed).
  int64_t resume_failed_generation = 0;
  // What the coordinator found when a rank of `generation` said its copy of
  // `path` (that generation's resume checkpoint) was not the record's bytes
  // (BadCheckpoint.coordinator_copy): damaged (removed) or intact. Later
  // reports of that generation get the same answer without a second read.
  struct CopyVerdict {
    int64_t generation = -1;
    std::string path;
    bool damaged = false;
  };
  CopyVerdict copy_verdict;
  std::string reason;
  std::string warning;  // the newest rank warning (JobStatus.warning)
  // The newest failure's event message and time (JobStatus.last_cause);
  // after a coordinator restart, read back from the job's events.
  std::string last_cause;
  int64_t last_cause_ms = 0;
  // The straggler ranks the last straggler event named, and when it was
  // emitted (events are rate-limited per job).
  std::vector<int> flagged;
  absl::Time flagged_at = absl::InfinitePast();
  // The worker the last failure named (hung rank's, lost worker) and when:
  // the restart places nothing there until that worker is heard from after
  // the failure or lately (WorkerRegistry::HeardLately), so a host cut off
  // just before its heartbeat went stale is not picked again.
  std::string implicated;
  absl::Time implicated_at = absl::InfinitePast();
  // on_straggler: restart_without. The rank being flagged (-1: none), since
  // when and when last (a gap over 10 s starts anew); workers the job
  // avoids until a time, when others can take their place.
  int straggler_rank = -1;
  absl::Time straggler_since, straggler_seen;
  std::map<std::string, absl::Time> avoid;
  // When stacks were last asked for (DebugJob; not stored).
  absl::Time debugged_at = absl::InfinitePast();
  int64_t submitted_ms = 0, started_ms = 0, finished_ms = 0;
  absl::Duration heartbeat_timeout;
  // Current generation (ranks empty unless RUNNING).
  std::vector<RankState> ranks;
  std::vector<std::string> workers;  // node_rank order
  // The newest kPastGenerations generations that ended (not stored): the
  // worker of each rank (who may still upload their logs) and the ranks'
  // tokens (a trainer of one of them is told its generation is over,
  // ABORTED: JobScheduler::TrainerCaller).
  static constexpr size_t kPastGenerations = 4;
  struct PastGeneration {
    std::vector<std::string> rank_workers;
    absl::flat_hash_set<std::string> tokens;
  };
  std::map<int64_t, PastGeneration> past;
  // The rank tokens of the current generation, to its rank (rebuilt with
  // `ranks`: IndexTokens): a caller whose token is no rank's here or in
  // `past` learns nothing of the job (JobScheduler::TrainerCaller). Looked
  // up, never scanned: a step report costs the same for a job of any size.
  absl::flat_hash_map<std::string, int> token_rank;
  void IndexTokens() {
    token_rank.clear();
    for (size_t i = 0; i < ranks.size(); ++i) {
      if (!ranks[i].task.token().empty()) token_rank[ranks[i].task.token()] = static_cast<int>(i);
    }
  }
  std::string master_addr;
  int master_port = 0;
  std::string resume_from;
  // Elastic growth (job_growth.cc): the checkpoint step after which this
  // generation ends to restart on more nodes; 0: none planned, -1: a
  // planned growth's checkpoint was missed, not retried this generation.
  int64_t grow_at = 0;
  bool growing = false;  // RESTARTING to grow, not after a failure
  // Store writes that failed after memory moved on, retried on every
  // Supervise until they succeed: the end of a generation (the job row with
  // it), and ranks of the current generation that exited 0.
  struct UnrecordedEnd {
    int64_t generation = 0;
    int64_t ended_ms = 0;
    std::string why;
  };
  std::optional<UnrecordedEnd> unrecorded_end;
  std::set<int> unrecorded_done;
  GenerationProgress progress;
  MetricAggregator metrics;
};

inline bool IsFinal(v1::JobState s) {
  return s == v1::SUCCEEDED || s == v1::FAILED || s == v1::CANCELLED;
}

// The job's row in the Store.
JobRow RowOf(const Job& job);

}  // namespace frameworm::coordinator

#endif  // FRAMEWORM_COORDINATOR_JOB_H_
