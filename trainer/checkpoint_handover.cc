#include "trainer/checkpoint_handover.h"

#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"

namespace frameworm {

void RemoveCheckpointIn(const std::string& dir, const std::string& path) {
  namespace fs = std::filesystem;
  if (dir.empty()) return;
  std::error_code ec;
  const fs::path p = fs::absolute(path, ec).lexically_normal();
  const fs::path d = fs::absolute(dir, ec).lexically_normal();
  const std::string name = p.filename().string();
  if (ec || p.parent_path() != d || name.rfind("ckpt-", 0) != 0 ||
      p.extension() != ".pt" || fs::is_symlink(p, ec) || !fs::is_regular_file(p, ec)) {
    return;
  }
  fs::remove(p, ec);
}

absl::Status HandOverCheckpoint(ControlChannel& channel, const CheckpointReport& report,
                                const std::string& checkpoint_dir, const std::string& memory_dir,
                                absl::Duration retry_pause) {
  auto away = [](const absl::Status& s) { return s.code() == absl::StatusCode::kUnavailable; };
  auto pause = [&] { std::this_thread::sleep_for(absl::ToChronoNanoseconds(retry_pause)); };
  // An upload past its deadline (sized for the file) would only time out
  // again: only UNAVAILABLE is tried again.
  absl::Status up = report.memory ? absl::OkStatus() : channel.UploadCheckpoint(report.step, report.path);
  for (int i = 0; i < 3 && away(up); ++i) {
    pause();
    up = channel.UploadCheckpoint(report.step, report.path);
  }
  if (!up.ok()) {
    return absl::Status(up.code(),
                        absl::StrCat("its upload to the coordinator failed: ", up.message()));
  }
  absl::StatusOr<std::vector<std::string>> expired = channel.ReportCheckpoint(report);
  for (int i = 0; i < 3 && CoordinatorAway(expired.status().code()); ++i) {
    pause();
    expired = channel.ReportCheckpoint(report);
  }
  if (!expired.ok()) {
    if (report.memory) RemoveCheckpointIn(memory_dir, report.path);
    return absl::Status(expired.status().code(),
                        absl::StrCat("its report to the coordinator failed: ",
                                     expired.status().message()));
  }
  for (const std::string& old : *expired) {
    RemoveCheckpointIn(checkpoint_dir, old);
    RemoveCheckpointIn(memory_dir, old);
  }
  return absl::OkStatus();
}

}  // namespace frameworm
