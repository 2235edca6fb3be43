#include "coordinator/generation_progress.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_format.h"

namespace frameworm::coordinator {

void GenerationProgress::Start(int world, absl::Time now) {
  ranks_.assign(static_cast<size_t>(std::max(0, world)), Rank{});
  any_report_ = false;
  started_ = now;
  checkpoint_at_ = 0;
  in_flight_ = 0;
  last_checkpoint_ = now;
}

void GenerationProgress::ExpectReportsSince(absl::Time now) {
  any_report_ = true;
  first_report_ = now;
  for (Rank& r : ranks_) {
    r.reported = true;
    r.last_report = now;
  }
}

void GenerationProgress::ForgiveStall(absl::Duration gap, absl::Time now) {
  started_ = std::min(now, started_ + gap);
  first_report_ = std::min(now, first_report_ + gap);
  for (Rank& r : ranks_) r.last_report = std::min(now, r.last_report + gap);
}

int64_t GenerationProgress::Step(int rank, int64_t step, int64_t total_steps,
                                 absl::Time now, int64_t in_flight) {
  Rank& r = ranks_[rank];
  if (rank == 0) in_flight_ = in_flight;
  r.reported = true;
  r.last_report = now;
  r.last_step = step;
  if (!any_report_) {
    any_report_ = true;
    first_report_ = now;
  }
  max_step_ = std::max(max_step_, step);
  if (total_steps > 0) reported_total_steps_ = total_steps;
  // A pending checkpoint every rank has long passed was missed: drop it
  // (not one rank 0 is still writing or uploading).
  if (checkpoint_at_ > 0 && in_flight_ < checkpoint_at_ &&
      std::none_of(ranks_.begin(), ranks_.end(), [&](const Rank& x) {
        return !x.done && x.last_step <= checkpoint_at_ + 10;
      }))
    checkpoint_at_ = 0;
  return checkpoint_at_;
}

int64_t GenerationProgress::Progress(int rank, absl::Time now, int64_t in_flight) {
  ranks_[rank].last_report = now;
  if (rank == 0) in_flight_ = in_flight;
  return checkpoint_at_;
}

void GenerationProgress::Ping(int rank, absl::Time now, double waiting_seconds,
                              bool measures_wait, std::optional<RankCollectives> collectives) {
  Rank& r = ranks_[rank];
  r.pinged = now;
  r.waiting = waiting_seconds;
  r.measures_wait = measures_wait;
  if (collectives) {
    collectives->at = now;
    r.collectives = std::move(collectives);
  }
}

std::optional<CollectiveVerdict> GenerationProgress::CompareRecorders(absl::Time now) const {
  std::vector<const RankCollectives*> view;
  for (const Rank& r : ranks_) view.push_back(!r.done && r.collectives ? &*r.collectives : nullptr);
  return CompareCollectives(view, now);
}

bool GenerationProgress::MarkDone(int rank) {
  if (ranks_[rank].done) return false;
  ranks_[rank].done = true;
  if (rank == 0) in_flight_ = 0;  // its uploads ended with it
  return true;
}

bool GenerationProgress::AllDone() const {
  return std::all_of(ranks_.begin(), ranks_.end(),
                     [](const Rank& r) { return r.done; });
}

int64_t GenerationProgress::RequestCheckpoint(int lead) {
  if (checkpoint_at_ == 0) checkpoint_at_ = max_step_ + lead;
  return checkpoint_at_;
}

void GenerationProgress::CheckpointRecorded(int64_t step, absl::Time now) {
  if (checkpoint_at_ > 0 && step >= checkpoint_at_) checkpoint_at_ = 0;
  last_checkpoint_ = now;
}

void GenerationProgress::MaybeTimedCheckpoint(absl::Time now,
                                              absl::Duration every, int lead) {
  if (every > absl::ZeroDuration() && any_report_ && checkpoint_at_ == 0 &&
      now - last_checkpoint_ >= every) {
    checkpoint_at_ = max_step_ + lead;
    // The next interval counts from this ask: one dropped as missed (not
    // taken, or uploading past the ranks' 10 steps from a program that
    // does not report checkpoint_in_flight) is asked again an interval
    // later, not at the next tick.
    last_checkpoint_ = now;
  }
}

void GenerationProgress::MaybeSteppedCheckpoint(int64_t every, int lead) {
  if (every <= 0 || !any_report_ || checkpoint_at_ != 0) return;
  const int64_t from = max_step_ + std::max(lead, 1);
  checkpoint_at_ = (from + every - 1) / every * every;
}

std::optional<std::string> GenerationProgress::Hung(
    absl::Time now, absl::Duration timeout, std::optional<absl::Duration> startup,
    int* rank) const {
  if (startup) {
    for (size_t i = 0; i < ranks_.size(); ++i) {
      const Rank& r = ranks_[i];
      if (!r.done && !r.reported && now - started_ > *startup) {
        if (rank != nullptr) *rank = static_cast<int>(i);
        return absl::StrCat("rank ", i, " hung: no report within ",
                            absl::FormatDuration(*startup), " of its start");
      }
    }
  }
  if (!any_report_) return std::nullopt;
  // Silent ranks; a rank whose recent ping says it waits in the collectives
  // is waiting for another one.
  // Pings come about once a second: one older than this is from a process
  // that stopped pinging (stopped, gone), whatever it said then (a rank
  // stopped inside a collective last said it was waiting).
  constexpr absl::Duration kPingFresh = absl::Milliseconds(2500);
  auto fresh = [&](const Rank& r) { return now - r.pinged <= kPingFresh; };
  auto waiting = [&](const Rank& r) { return fresh(r) && r.measures_wait && r.waiting > 0; };
  // Pings that do not measure waits: alive, but waiting or busy, not known.
  auto unknown = [&](const Rank& r) { return fresh(r) && !r.measures_wait; };
  auto last_of = [&](const Rank& r) { return r.reported ? r.last_report : first_report_; };
  int first = -1, culprit = -1;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    const Rank& r = ranks_[i];
    if (r.done) continue;
    if (now - last_of(r) <= timeout) continue;
    if (first < 0) first = static_cast<int>(i);
    if (culprit < 0 && !waiting(r) && !unknown(r)) culprit = static_cast<int>(i);
  }
  if (first < 0) return std::nullopt;
  if (culprit < 0) {
    // Every rank silent that long waits in the collectives: the one they
    // wait for reported a little later (its last report can trail theirs
    // by up to a step) and is not waiting; the stalest such rank.
    for (size_t i = 0; i < ranks_.size(); ++i) {
      const Rank& r = ranks_[i];
      if (r.done || waiting(r) || unknown(r)) continue;
      if (culprit < 0 || last_of(r) < last_of(ranks_[culprit])) culprit = static_cast<int>(i);
    }
  }
  // The flight recorders, when they name a rank that never reached the
  // collective the others wait in, outrank the pings.
  const std::optional<CollectiveVerdict> recorded = CompareRecorders(now);
  if (recorded && !recorded->behind.empty()) culprit = recorded->behind.front();
  const int h = culprit >= 0 ? culprit : first;
  const Rank& r = ranks_[h];
  const absl::Time last = last_of(r);
  if (rank != nullptr) *rank = h;
  std::string out = absl::StrCat("rank ", h, " hung: no step report for ",
                                 absl::FormatDuration(absl::Trunc(now - last, absl::Milliseconds(100))),
                                 " (last step ", r.last_step, ")");
  std::vector<std::string> waiters;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    if (static_cast<int>(i) == h || ranks_[i].done || !waiting(ranks_[i])) continue;
    waiters.push_back(absl::StrCat(i, " (", absl::StrFormat("%.1f", ranks_[i].waiting), " s)"));
  }
  if (culprit >= 0 && !waiters.empty()) {
    absl::StrAppend(&out, "; rank", waiters.size() > 1 ? "s " : " ", absl::StrJoin(waiters, ", "),
                    waiters.size() > 1 ? " wait" : " waits", " for it in the gradient collectives");
  }
  if (culprit < 0) {
    absl::StrAppend(&out, "; every silent rank's process still pings and none measures its waits "
                          "in the collectives, so which rank the others wait for is not known "
                          "(named: the first)");
  } else if (!waiters.empty() || r.pinged != absl::InfinitePast()) {
    absl::StrAppend(&out, "; its process ",
                    fresh(r) ? (waiting(r) ? "still pings, waiting in a collective"
                                           : "still pings (busy outside the collectives)")
                             : "sends no sign of life (stopped or gone)");
  }
  if (recorded) absl::StrAppend(&out, "; ", recorded->text);
  return out;
}


}  // namespace frameworm::coordinator
