// Rank 0's disk checkpoints handed over to the coordinator
// (HandOverCheckpoint: upload, then report) on a thread of their own, so
// the trainer's checkpoint thread is free as soon as the file is written:
// in-memory checkpoints go on while a large checkpoint uploads, and a
// killed trainer loses at most one memory interval even then.
//
// One hand-over at a time, in the order submitted; at most one more waits.
// A checkpoint submitted while one waits supersedes it: the waiting one's
// file is removed from `checkpoint_dir` (never reported, so nothing would
// resume from it or expire it; the newer one holds a later step) and
// `failed` is told, ABORTED, on the submitting thread. Otherwise `failed`
// runs on the uploader's thread for every checkpoint that is not reported,
// with HandOverCheckpoint's error. `checkpoint_dir` and `memory_dir` are
// HandOverCheckpoint's.
//
// Drain() returns once everything submitted has been handed over (the
// run's end: its last checkpoint is recorded before the process exits), or
// false after its timeout; the destructor drains, then joins the thread.
// Thread safety: Submit and Drain may be called from any thread.
#ifndef FRAMEWORM_TRAINER_CHECKPOINT_UPLOADER_H_
#define FRAMEWORM_TRAINER_CHECKPOINT_UPLOADER_H_

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "trainer/control_channel.h"

namespace frameworm {

class CheckpointUploader {
 public:
  using Failed = std::function<void(const CheckpointReport&, const absl::Status&)>;
  // `channel`: the uploader's own (a channel is used from one thread).
  CheckpointUploader(std::unique_ptr<ControlChannel> channel, std::string checkpoint_dir,
                     std::string memory_dir, Failed failed,
                     absl::Duration retry_pause = absl::Seconds(1));
  ~CheckpointUploader();
  CheckpointUploader(const CheckpointUploader&) = delete;
  CheckpointUploader& operator=(const CheckpointUploader&) = delete;

  void Submit(CheckpointReport report);
  // Whether everything submitted was handed over within `timeout`.
  bool Drain(absl::Duration timeout = absl::InfiniteDuration());
  // The highest step being handed over or waiting, 0: none.
  int64_t InFlightStep();

 private:
  void Loop();

  const std::unique_ptr<ControlChannel> channel_;
  const std::string checkpoint_dir_;
  const std::string memory_dir_;
  const Failed failed_;
  const absl::Duration retry_pause_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<CheckpointReport> waiting_;  // guarded by mu_
  bool busy_ = false;                        // a hand-over runs; guarded by mu_
  int64_t busy_step_ = 0;                    // its step; guarded by mu_
  bool stop_ = false;                        // guarded by mu_
  std::thread thread_;                       // last: started once the rest is set
};

}  // namespace frameworm

#endif  // FRAMEWORM_TRAINER_CHECKPOINT_UPLOADER_H_
