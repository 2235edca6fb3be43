// TensorBoard event files per job, written by the coordinator from the
// aggregated metrics (docs/ARCHITECTURE.md "Events"): under
// <root>/<job id>/events.out.tfevents.<unix seconds>.frameworm, one record
// per completed step (every rank reported) with a scalar per mean value
// (loss, accuracy, ...), samples_per_second and step_seconds (the slowest
// rank's). Records are TFRecords: a little-endian uint64 length, its masked
// CRC-32C, the serialized tensorflow.Event (hand-encoded: wall_time, step,
// summary { value { tag, simple_value } }), its masked CRC-32C; the first
// record of a file is the file_version "brain.Event:2". A step written
// again (a generation re-running steps after a restart) is preceded by a
// SessionLog START event at that step, so TensorBoard drops the points it
// showed from that step on and shows the re-run (TensorBoard reads version
// 2 files that way; it does not go by the steps' order).
//
// A file that cannot be written is reported once per job on stderr and
// skipped: TensorBoard files are a view, never a reason to lose a report.
//
// Bounded (with a store): once more than `max_job_bytes` has been appended
// to a job's file since it was made or compacted, the job's history is
// rewritten from the store (whose metric rows the coordinator thins to a
// few thousand steps per job, spread over the whole run:
// --metric-history; the coordinator passes no store when that is 0, keep
// everything) into a new file, and the job's other event files are
// deleted. The first append of a coordinator run to a job with event files
// of earlier runs compacts at once, so restarts do not pile up files
// either. A job's directory thus holds one file of at most about
// `max_job_bytes` plus its thinned history. The new file is written under
// a temporary name (without "tfevents", which TensorBoard ignores) and
// renamed; its name's timestamp is later than any file it replaces, and
// it starts with SessionLog START at step 0, so a TensorBoard that showed
// the old file drops it and shows the new one. TensorBoard keeps about
// 1,000 points per scalar anyway. A compaction that fails (the store
// cannot be read, the disk) leaves the file as it was, appended to, and is
// tried again after another `max_job_bytes`.
//
// Thread safety: thread-safe (one mutex); Append runs on the MetricWriter's
// thread, RemoveJob on the coordinator's bounded-growth path.
#ifndef FRAMEWORM_COORDINATOR_TENSORBOARD_LOG_H_
#define FRAMEWORM_COORDINATOR_TENSORBOARD_LOG_H_

#include <cstdint>
#include <ios>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/store.h"
#include "frameworm/v1/common.pb.h"

namespace frameworm::coordinator {

class TensorBoardLog {
 public:
  static constexpr int64_t kMaxJobBytes = int64_t{8} << 20;
  // `store` (not owned, may be null: files are never compacted) holds the
  // rows Append is given, already committed.
  explicit TensorBoardLog(std::string root, Store* store = nullptr,
                          int64_t max_job_bytes = kMaxJobBytes)
      : root_(std::move(root)), store_(store), max_job_bytes_(max_job_bytes) {}

  // Writes the completed steps among `rows` (MetricRow.aggregate holds a
  // serialized AggregatedStep); partial steps wait for their last rank.
  void Append(const std::vector<MetricRow>& rows) ABSL_LOCKS_EXCLUDED(mu_);
  // The job's directory, <root>/<job id>.
  std::string Dir(const std::string& job_id) const;
  // Deletes the job's directory (the job expired).
  void RemoveJob(const std::string& job_id) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct File {
    std::string path;
    int64_t stamp = 0;  // the Unix seconds in its name
    int64_t bytes = 0;
    int64_t compacted = 0;  // of which the history it was compacted from
    int64_t last_step = 0;  // the newest step written
  };
  // Writes `bytes` to `path` (trunc or app); false after reporting the
  // job's first failure on stderr.
  bool Write(const std::string& job, const std::string& path, const std::string& bytes,
             std::ios::openmode mode) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A new file of the job's history read from the store, replacing every
  // event file of the job; false (nothing changed) when the store cannot be
  // read or the file cannot be written.
  bool Compact(const std::string& job, File& file) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string root_;
  Store* const store_;
  const int64_t max_job_bytes_;
  absl::Mutex mu_;
  std::map<std::string, File> files_ ABSL_GUARDED_BY(mu_);  // job -> its file
  std::set<std::string> failed_ ABSL_GUARDED_BY(mu_);  // jobs whose failure was logged
};

// CRC-32C (Castagnoli) of `data`, and TFRecord's masking of it.
uint32_t Crc32c(const std::string& data);
uint32_t MaskedCrc32c(const std::string& data);
// One TFRecord around `payload`.
std::string TfRecord(const std::string& payload);
// A serialized tensorflow.Event: wall_time, step and scalar values.
std::string ScalarEvent(double wall_time, int64_t step,
                        const std::vector<std::pair<std::string, float>>& scalars);
// The tensorflow.Event that opens a file (file_version "brain.Event:2").
std::string FileVersionEvent(double wall_time);
// A tensorflow.Event with SessionLog START at `step`: TensorBoard drops the
// points it showed at `step` and after (a run that went back to it).
std::string SessionStartEvent(double wall_time, int64_t step);

}  // namespace frameworm::coordinator

#endif  // FRAMEWORM_COORDINATOR_TENSORBOARD_LOG_H_
