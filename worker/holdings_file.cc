#include "worker/holdings_file.h"

#include <filesystem>
#include <fstream>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/replace_file.h"

namespace frameworm {

absl::Status WriteHoldingsFile(const std::string& path, const std::vector<HeldCheckpoint>& held) {
  std::string text;
  for (const HeldCheckpoint& h : held) {
    absl::StrAppend(&text, "v1\t", h.job_id, "\t", h.step, "\t", h.bytes, "\t", h.checksum, "\t",
                    h.copied ? 1 : 0, "\t", absl::BytesToHexString(h.secret), "\t",
                    absl::BytesToHexString(h.path), "\n");
  }
  return ReplaceFile(path, text);
}

bool DecodeHexField(absl::string_view hex, std::string* bytes) {
  if (hex.size() % 2 != 0 ||
      hex.find_first_not_of("0123456789abcdefABCDEF") != absl::string_view::npos) {
    return false;
  }
  *bytes = absl::HexStringToBytes(hex);
  return true;
}

absl::StatusOr<std::vector<HeldCheckpoint>> ReadHoldingsFile(const std::string& path) {
  std::vector<HeldCheckpoint> out;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return out;
  std::ifstream in(path);
  if (!in) return absl::InternalError(absl::StrCat("cannot read ", path));
  std::string line;
  while (std::getline(in, line) && out.size() < kMaxHeldCheckpoints) {
    std::vector<absl::string_view> f = absl::StrSplit(line, '\t');
    HeldCheckpoint h;
    if (f.size() != 8 || f[0] != "v1" || (f[5] != "0" && f[5] != "1") ||
        !DecodeHexField(f[6], &h.secret) || !DecodeHexField(f[7], &h.path)) {
      continue;
    }
    h.job_id = std::string(f[1]);
    h.checksum = std::string(f[4]);
    h.copied = f[5] == "1";
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
