#include "coordinator/checkpoint_paths.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/printable.h"

namespace frameworm::coordinator {

bool IsCleanAbsolutePath(const std::string& path) {
  if (path.empty() || path.front() != '/' || path.size() > 4096 ||
      path.find('\0') != std::string::npos || HasControlCharacter(path)) {
    return false;
  }
  absl::string_view rest = absl::StripSuffix(absl::string_view(path).substr(1), "/");
  if (rest.empty()) return true;  // "/"
  for (absl::string_view part : absl::StrSplit(rest, '/')) {
    if (part.empty() || part == "." || part == "..") return false;
  }
  return true;
}

namespace {

// `path` is `root` or below it (both clean).
bool Within(const std::string& path, const std::string& root) {
  const std::string r(absl::StripSuffix(root, "/"));
  const std::string p(absl::StripSuffix(path, "/"));
  return p == r || absl::StartsWith(p, r + "/");
}

}  // namespace

absl::Status CheckCheckpointDirAllowed(const std::string& dir,
                                       const std::vector<std::string>& roots) {
  if (dir.empty()) return absl::OkStatus();
  if (!IsCleanAbsolutePath(dir)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint.dir '", ShownValue(dir), "' must be an absolute path without '.' or '..'"));
  }
  for (const std::string& root : roots) {
    if (IsCleanAbsolutePath(root) && Within(dir, root)) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "checkpoint.dir '", ShownValue(dir), "' is outside the directories this coordinator allows (",
      absl::StrJoin(roots, ", "), "; set them with frameworm-coordinator --checkpoint-root)"));
}

absl::Status CheckReportedCheckpointPath(const std::string& path, int64_t step,
                                         const std::string& job_dir) {
  const std::string want =
      absl::StrCat(absl::StripSuffix(job_dir, "/"), "/ckpt-", step, ".pt");
  if (path != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint path '", ShownValue(path), "' is not this job's checkpoint of step ", step,
        " (expected ", want, ")"));
  }
  return absl::OkStatus();
}

}  // namespace frameworm::coordinator
