#include "worker/memory_dirs_file.h"

#include <filesystem>
#include <fstream>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/replace_file.h"
#include "worker/holdings_file.h"

namespace frameworm {

absl::Status WriteMemoryDirsFile(const std::string& path,
                                 const std::vector<WatchedMemoryDir>& dirs) {
  std::string text;
  for (const WatchedMemoryDir& d : dirs) {
    absl::StrAppend(&text, "v1\t", absl::BytesToHexString(d.job_id), "\t",
                    absl::BytesToHexString(d.dir), "\n");
  }
  return ReplaceFile(path, text);
}

absl::StatusOr<std::vector<WatchedMemoryDir>> ReadMemoryDirsFile(const std::string& path) {
  std::vector<WatchedMemoryDir> out;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec) && !ec) return out;
  std::ifstream in(path);
  if (!std::filesystem::is_regular_file(path, ec) || !in) {
    return absl::InternalError(absl::StrCat("cannot read ", path, ": not a readable file"));
  }
  std::string line;
  while (out.size() < MemoryDirSweeper::kMaxDirs && std::getline(in, line)) {
    std::vector<absl::string_view> f = absl::StrSplit(line, '\t');
    WatchedMemoryDir d;
    if (f.size() != 3 || f[0] != "v1" || !DecodeHexField(f[1], &d.job_id) ||
        !DecodeHexField(f[2], &d.dir) || d.dir.empty()) {
      continue;
    }
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace frameworm
