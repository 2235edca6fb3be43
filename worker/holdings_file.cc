#include "worker/holdings_file.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace frameworm {

absl::Status WriteHoldingsFile(const std::string& path, const std::vector<HeldCheckpoint>& held) {
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    for (const HeldCheckpoint& h : held) {
      out << "v1\t" << h.job_id << '\t' << h.step << '\t' << h.bytes << '\t' << h.checksum << '\t'
          << (h.copied ? 1 : 0) << '\t' << absl::BytesToHexString(h.secret) << '\t'
          << absl::BytesToHexString(h.path) << '\n';
    }
    out.flush();
    if (!out) {
      std::error_code ec;
      std::filesystem::remove(tmp, ec);
      return absl::InternalError(absl::StrCat("cannot write ", tmp, ": ", std::strerror(errno)));
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    return absl::InternalError(absl::StrCat("cannot rename ", tmp, " to ", path));
  }
  return absl::OkStatus();
}

namespace {

bool IsHex(absl::string_view s) {
  return s.size() % 2 == 0 && s.find_first_not_of("0123456789abcdefABCDEF") == absl::string_view::npos;
}

}  // namespace

absl::StatusOr<std::vector<HeldCheckpoint>> ReadHoldingsFile(const std::string& path) {
  std::vector<HeldCheckpoint> out;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return out;
  std::ifstream in(path);
  if (!in) return absl::InternalError(absl::StrCat("cannot read ", path));
  std::string line;
  while (std::getline(in, line) && out.size() < kMaxHeldCheckpoints) {
    std::vector<absl::string_view> f = absl::StrSplit(line, '\t');
    if (f.size() != 8 || f[0] != "v1" || (f[5] != "0" && f[5] != "1") || !IsHex(f[6]) ||
        !IsHex(f[7])) {
      continue;
    }
    HeldCheckpoint h;
    h.job_id = std::string(f[1]);
    h.checksum = std::string(f[4]);
    h.copied = f[5] == "1";
    h.secret = absl::HexStringToBytes(f[6]);
    h.path = absl::HexStringToBytes(f[7]);
    if (!absl::SimpleAtoi(f[2], &h.step) || !absl::SimpleAtoi(f[3], &h.bytes) ||
        !CheckHold(h).ok()) {
      continue;
    }
    const std::filesystem::file_status st = std::filesystem::symlink_status(h.path, ec);
    if (ec || !std::filesystem::is_regular_file(st) ||
        std::filesystem::file_size(h.path, ec) != static_cast<uintmax_t>(h.bytes) || ec) {
      continue;  // gone (or replaced) while the worker was down
    }
    out.push_back(std::move(h));
  }
  return out;
}

}  // namespace frameworm
