#include "worker/fetch_journal.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/received_file.h"
#include "worker/checkpoint_holdings.h"

namespace frameworm {

namespace fs = std::filesystem;

absl::Status NoteFetchStarted(const std::string& journal, const std::string& target) {
  const std::string tmp = absl::StrCat(journal, ".tmp.", ::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << "v1\t" << PartialTag() << '\t' << absl::BytesToHexString(target) << '\n';
    out.flush();
    if (!out) {
      std::error_code ec;
      fs::remove(tmp, ec);
      return absl::InternalError(absl::StrCat("cannot write ", tmp, ": ", std::strerror(errno)));
    }
  }
  std::error_code ec;
  fs::rename(tmp, journal, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return absl::InternalError(absl::StrCat("cannot rename ", tmp, " to ", journal));
  }
  return absl::OkStatus();
}

void NoteFetchEnded(const std::string& journal) {
  std::error_code ec;
  fs::remove(journal, ec);
}

std::vector<std::string> RemoveStalePartials(const std::string& journal) {
  std::vector<std::string> removed;
  std::string line;
  {
    std::ifstream in(journal);
    if (!in || !std::getline(in, line)) {
      NoteFetchEnded(journal);
      return removed;
    }
  }
  NoteFetchEnded(journal);
  std::vector<absl::string_view> f = absl::StrSplit(line, '\t');
  // The tag: "<pid>.<hex>", nothing a path could be made of.
  if (f.size() != 3 || f[0] != "v1" || f[1].empty() || f[1].size() > 40 ||
      f[1].find_first_not_of("0123456789abcdef.") != absl::string_view::npos ||
      f[2].size() % 2 != 0 ||
      f[2].find_first_not_of("0123456789abcdefABCDEF") != absl::string_view::npos) {
    return removed;
  }
  const std::string target = absl::HexStringToBytes(f[2]);
  // The hold rules, with any step: the name is ckpt-<step>.pt.
  const std::string name = fs::path(target).filename().string();
  HeldCheckpoint h;
  h.job_id = "journal";
  h.checksum = "crc32:00000000";
  if (!absl::StartsWith(name, "ckpt-") || !absl::EndsWith(name, ".pt") ||
      !absl::SimpleAtoi(name.substr(5, name.size() - 8), &h.step)) {
    return removed;
  }
  h.path = target;
  if (!CheckHold(h).ok()) return removed;
  const std::string prefix = absl::StrCat(name, ".partial-", f[1], "-");
  std::error_code ec;
  for (fs::directory_iterator it(fs::path(target).parent_path(), ec), end; !ec && it != end;
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
  return removed;
}

}  // namespace frameworm
