// Rank 0's handing over of a checkpoint file it wrote to the coordinator
// (frameworm-train's on_checkpoint: an in-memory one on the trainer's
// checkpoint thread, a disk one on CheckpointUploader's). A disk checkpoint is uploaded first (the coordinator's copy, so a
// rank on a host without the file can resume from it) and only then
// reported; an in-memory one (`report.memory`) is reported only, since the
// workers copy it. A coordinator that is away (UNAVAILABLE; for the
// report, which is idempotent, also DEADLINE_EXCEEDED) gets 3 more tries,
// `retry_pause` apart.
//
// Once recorded, the files the answer lists as expired are removed when
// they are ckpt-<step>.pt files directly inside `checkpoint_dir` or
// `memory_dir` (the coordinator's answer never makes this delete anything
// else). An in-memory checkpoint that was not recorded is removed too: no
// record means nothing resumes from it, expires it or releases it when the
// job ends, and it holds a whole snapshot of the node's RAM. A disk one
// stays on disk. (A coordinator that was only slow may record the removed
// one later: its worker, asked to hold it, finds no file and holds none,
// so a restart that picks it finds no copy and is not counted.)
//
// Errors: the last error of the upload ("its upload to the coordinator
// failed: ...") or of the report ("its report to the coordinator failed:
// ..."), with the code of the call.
// Thread safety: none of its own; one call at a time per channel use.
#ifndef FRAMEWORM_TRAINER_CHECKPOINT_HANDOVER_H_
#define FRAMEWORM_TRAINER_CHECKPOINT_HANDOVER_H_

#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "trainer/control_channel.h"

namespace frameworm {

absl::Status HandOverCheckpoint(ControlChannel& channel, const CheckpointReport& report,
                                const std::string& checkpoint_dir, const std::string& memory_dir,
                                absl::Duration retry_pause = absl::Seconds(1));

// Deletes `path` only when it is a regular ckpt-<step>.pt file directly
// inside `dir` (not a link); an empty `dir` deletes nothing.
void RemoveCheckpointIn(const std::string& dir, const std::string& path);

}  // namespace frameworm

#endif  // FRAMEWORM_TRAINER_CHECKPOINT_HANDOVER_H_
