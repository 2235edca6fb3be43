#include "worker/fetch_journal.h"

#include <filesystem>
#include <fstream>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/received_file.h"
#include "common/replace_file.h"
#include "worker/checkpoint_holdings.h"
#include "worker/holdings_file.h"

namespace frameworm {

namespace fs = std::filesystem;

namespace {

// OK when `path` is one a hold could name (any step).
bool HoldablePath(const std::string& path) {
  const std::string name = fs::path(path).filename().string();
  HeldCheckpoint h;
  h.job_id = "journal";
  h.checksum = "crc32:00000000";
  h.path = path;
  return absl::StartsWith(name, "ckpt-") && absl::EndsWith(name, ".pt") &&
         absl::SimpleAtoi(name.substr(5, name.size() - 8), &h.step) && CheckHold(h).ok();
}

// The partial files of `tag` beside `path`: "<name>.partial-<tag>-<n>".
void RemovePartialsOf(const std::string& path, const std::string& tag,
                      std::vector<std::string>& removed) {
  const std::string prefix = absl::StrCat(fs::path(path).filename().string(), ".partial-", tag, "-");
  std::error_code ec;
  for (fs::directory_iterator it(fs::path(path).parent_path(), ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string entry = it->path().filename().string();
    uint64_t n = 0;
    if (!absl::StartsWith(entry, prefix) || !absl::SimpleAtoi(entry.substr(prefix.size()), &n)) {
      continue;
    }
    std::error_code in;
    if (!fs::is_regular_file(fs::symlink_status(it->path(), in)) || in) continue;
    if (fs::remove(it->path(), in)) removed.push_back(it->path().string());
  }
}

}  // namespace

std::vector<std::string> FetchJournal::Recover(
    const std::function<bool(const std::string&)>& held) {
  std::vector<std::string> removed;
  std::vector<std::string> lines;
  {
    std::ifstream in(path_);
    std::string line;
    while (in && std::getline(in, line) && lines.size() < kMaxHeldCheckpoints) {
      lines.push_back(line);
    }
  }
  for (const std::string& line : lines) {
    std::vector<absl::string_view> f = absl::StrSplit(line, '\t');
    int64_t bytes = 0;
    // The tag: "<pid>.<hex>", nothing a path could be made of.
    if (f.size() != 6 || f[0] != "v1" || f[1].empty() || f[1].size() > 40 ||
        f[1].find_first_not_of("0123456789abcdef.") != absl::string_view::npos ||
        (f[2] != "0" && f[2] != "1") || !absl::SimpleAtoi(f[3], &bytes) ||
        !IsCrc32Text(std::string(f[4]))) {
      continue;
    }
    std::string target;
    if (!DecodeHexField(f[5], &target) || !HoldablePath(target)) continue;
    RemovePartialsOf(target, std::string(f[1]), removed);
    std::error_code ec;
    if (f[2] == "1" && !held(target) && fs::is_regular_file(fs::symlink_status(target, ec)) &&
        FileMatches(target, bytes, std::string(f[4])) && fs::remove(target, ec)) {
      removed.push_back(target);
    }
  }
  absl::MutexLock l(&mu_);
  entries_.clear();
  std::error_code ec;
  fs::remove(path_, ec);
  return removed;
}

uint64_t FetchJournal::Started(const std::string& path, int64_t bytes,
                               const std::string& checksum) {
  absl::MutexLock l(&mu_);
  while (entries_.size() >= kMaxHeldCheckpoints) entries_.erase(entries_.begin());
  const uint64_t id = next_id_++;
  entries_[id] = Entry{path, false, bytes, checksum};
  WriteLocked();
  return id;
}

void FetchJournal::Copied(uint64_t id) {
  absl::MutexLock l(&mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  it->second.copied = true;
  WriteLocked();
}

void FetchJournal::Ended(uint64_t id) {
  absl::MutexLock l(&mu_);
  if (entries_.erase(id) == 0) return;
  WriteLocked();
}

absl::Status FetchJournal::error() const {
  absl::MutexLock l(&mu_);
  return error_;
}

void FetchJournal::WriteLocked() {
  std::error_code ec;
  if (entries_.empty()) {
    fs::remove(path_, ec);
    return;
  }
  std::string text;
  for (const auto& [id, e] : entries_) {
    absl::StrAppend(&text, "v1\t", PartialTag(), "\t", e.copied ? 1 : 0, "\t", e.bytes, "\t",
                    e.checksum, "\t", absl::BytesToHexString(e.path), "\n");
  }
  if (absl::Status s = ReplaceFile(path_, text); !s.ok() && error_.ok()) error_ = s;
}

}  // namespace frameworm
