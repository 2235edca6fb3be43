// What the ranks of a job's current generation have done: step and
// progress reports, clean exits, and the checkpoint they are asked to take.
// From that it answers the time-driven questions: is a rank hung (no step
// report for longer than the timeout, counted from the generation's first
// report), and is an every_n_minutes checkpoint due. When ranks hang,
// liveness pings (Ping) tell which of them wait in the gradient
// collectives: the hung rank named is one that does not (stopped, dead,
// or busy elsewhere), the one the others wait for.
//
// Checkpoint steps are always ahead of every rank's progress: a request
// asks for max reported step + lead. A pending request that every running
// rank has passed by more than 10 steps was missed and is dropped, unless
// rank 0's latest report says a checkpoint of its step or later is in
// flight (StepMetrics.checkpoint_in_flight: written or uploading; it is
// recorded once there).
//
// Across generations (Start) the per-rank state, the first report and the
// pending request reset; the highest step and the trainers' total_steps
// carry over.
//
// Time: every method that needs the time takes it (the owner reads its
// injected Clock); nothing here reads a clock.
// Thread safety: not thread-safe; owned by a Job, under the Coordinator's
// mutex.
// Errors: none; ranks are checked by the caller (0 <= rank < world()).
#ifndef FRAMEWORM_COORDINATOR_GENERATION_PROGRESS_H_
#define FRAMEWORM_COORDINATOR_GENERATION_PROGRESS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "coordinator/collective_view.h"

namespace frameworm::coordinator {

class GenerationProgress {
 public:
  // A generation of `world` ranks starts (or is reloaded) at `now`; the
  // checkpoint timer starts too.
  void Start(int world, absl::Time now);
  // A generation reloaded after a coordinator restart that had reported
  // before it: every running rank's hang timer starts at `now`, as if each
  // had just reported (without this, a rank stuck across the restart would
  // never be caught).
  void ExpectReportsSince(absl::Time now);
  // The coordinator itself was stalled for `gap` (stopped, starved): every
  // timer moves on by `gap`, never past `now`, so no rank is blamed for
  // the coordinator's own silence.
  void ForgiveStall(absl::Duration gap, absl::Time now);
  int world() const { return static_cast<int>(ranks_.size()); }

  // A step report; returns the checkpoint step to tell the rank (0: none).
  // `in_flight`: its checkpoint_in_flight (kept for rank 0 only).
  int64_t Step(int rank, int64_t step, int64_t total_steps, absl::Time now,
               int64_t in_flight = 0);
  // A progress-only report (evaluating, checkpointing): refreshes the
  // rank's hang timer (and rank 0's `in_flight`) only. Returns the
  // checkpoint step.
  int64_t Progress(int rank, absl::Time now, int64_t in_flight = 0);
  // A liveness ping from the rank's process (not progress: the hang timer
  // stays): its training thread has been blocked in the gradient
  // collectives for `waiting_seconds` (0: it is not there).
  // `measures_wait` false: the program only pings (a Python entrypoint's
  // frameworm.Reporter), so whether it waits is not known. `collectives`:
  // its flight recorder (kept until the next ping that carries one).
  void Ping(int rank, absl::Time now, double waiting_seconds, bool measures_wait = true,
            std::optional<RankCollectives> collectives = std::nullopt);
  // The rank's latest flight recorder (null: none this generation).
  const RankCollectives* collectives(int rank) const {
    return ranks_[rank].collectives ? &*ranks_[rank].collectives : nullptr;
  }
  // CompareCollectives over the running ranks' latest recorders.
  std::optional<CollectiveVerdict> CompareRecorders(absl::Time now) const;
  // The rank exited 0; false when it already had.
  bool MarkDone(int rank);
  bool AllDone() const;
  bool done(int rank) const { return ranks_[rank].done; }
  // The rank sent a report this generation (or was reloaded as reporting).
  bool reported(int rank) const { return ranks_[rank].reported; }

  // The pending checkpoint step, or a new one at max step + `lead`.
  int64_t RequestCheckpoint(int lead);
  // A checkpoint of `step` completed at `now`.
  void CheckpointRecorded(int64_t step, absl::Time now);
  // Requests a checkpoint (max step + `lead`) when `every` > 0 has passed
  // since the last one recorded or asked for and nothing is pending; only
  // once ranks report.
  void MaybeTimedCheckpoint(absl::Time now, absl::Duration every, int lead);
  // Requests a checkpoint at the next multiple of `every` > 0 steps at
  // least `lead` past the max step, when nothing is pending; only once
  // ranks report (checkpoint.every_n_steps for a program that is not the
  // built-in trainer, which takes it as a flag: its Directive.checkpoint).
  void MaybeSteppedCheckpoint(int64_t every, int lead);
  int64_t checkpoint_at() const { return checkpoint_at_; }
  // Some rank sent a step report this generation (or it was reloaded after
  // reports, ExpectReportsSince).
  bool any_report() const { return any_report_; }

  // "rank <r> hung: ..." for a running rank silent for longer than
  // `timeout` (nullopt when none is, or no rank reported yet): among those,
  // the first one that is not known to wait in the collectives (its last
  // ping, within the last 2.5 s, said it waited); when all of those wait,
  // the rank they wait for is the stalest non-waiting one even if its own
  // silence is still shorter than `timeout` (its last report can trail
  // theirs by up to a step). Then the message names
  // the ranks that wait for it and for how long, and says whether the
  // culprit's process still pings (busy outside the collectives) or not
  // (stopped or gone). Without pings: the first silent rank. A rank whose
  // pings do not measure waits (measures_wait false) counts as neither
  // waiting nor culprit while it pings; if only such ranks are silent, the
  // first is named and the message says the culprit is not known. When the
  // ranks' flight recorders name ranks that never reached the collective
  // the others wait in (CompareCollectives), the first of those is the
  // culprit, and the recorder's sentence is appended in every case it has
  // one (behind, all inside, desynchronized). With
  // `startup` (trainers known to report, e.g. frameworm-train), a running
  // rank with no report at all that long after the generation's start (or
  // reload) is hung too, even before anyone reported. `rank` (optional)
  // gets the hung rank.
  std::optional<std::string> Hung(absl::Time now, absl::Duration timeout,
                                  std::optional<absl::Duration> startup = std::nullopt,
                                  int* rank = nullptr) const;

  // Highest step reported in any generation (RestoreMaxStep after reload).
  int64_t max_step() const { return max_step_; }
  void RestoreMaxStep(int64_t step) { max_step_ = step; }
  // total_steps as the trainers last reported it; 0: never.
  int64_t reported_total_steps() const { return reported_total_steps_; }

 private:
  struct Rank {
    bool done = false;      // exited 0
    bool reported = false;  // sent a step report this generation
    absl::Time last_report;
    int64_t last_step = 0;
    absl::Time pinged = absl::InfinitePast();  // last liveness ping
    double waiting = 0;  // its waiting_seconds
    bool measures_wait = true;
    std::optional<RankCollectives> collectives;  // its latest recorder
  };
  std::vector<Rank> ranks_;
  bool any_report_ = false;
  absl::Time started_;  // Start()
  absl::Time first_report_;
  int64_t checkpoint_at_ = 0;  // pending checkpoint step, 0: none
  int64_t in_flight_ = 0;      // rank 0's checkpoint_in_flight, 0: none
  absl::Time last_checkpoint_;
  int64_t max_step_ = 0;
  int64_t reported_total_steps_ = 0;
};

}  // namespace frameworm::coordinator

#endif  // FRAMEWORM_COORDINATOR_GENERATION_PROGRESS_H_
