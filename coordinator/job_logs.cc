#include "coordinator/job_logs.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace frameworm::coordinator {
namespace {

namespace fs = std::filesystem;

constexpr absl::string_view kPrefix = "rank-";
constexpr absl::string_view kSuffix = ".log";

}  // namespace

bool IsPathComponent(absl::string_view s) {
  return !s.empty() && s != "." && s != ".." &&
         s.find('/') == absl::string_view::npos &&
         s.find('\0') == absl::string_view::npos;
}

std::string JobLogs::Dir(const std::string& job_id) const {
  return (fs::path(options_.root) / job_id).string();
}

std::string JobLogs::Path(const std::string& job_id, int rank) const {
  return (fs::path(Dir(job_id)) / absl::StrCat(kPrefix, rank, kSuffix))
      .string();
}

absl::Status JobLogs::Check(const std::string& job_id, int rank) const {
  if (!IsPathComponent(job_id))
    return absl::InvalidArgumentError(
        absl::StrCat("job id '", job_id, "' is not a path component"));
  if (rank < 0)
    return absl::InvalidArgumentError(
        absl::StrCat("log chunk with bad rank ", rank));
  return absl::OkStatus();
}

absl::Status JobLogs::Append(const std::string& job_id, int rank,
                             absl::string_view data) const {
  if (absl::Status s = Check(job_id, rank); !s.ok()) return s;
  std::error_code ec;
  fs::create_directories(Dir(job_id), ec);
  const std::string path = Path(job_id, rank);
  std::ofstream out(path, std::ios::binary | std::ios::app);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
  if (!out) return absl::InternalError(absl::StrCat("cannot append to ", path));
  return absl::OkStatus();
}

void JobLogs::RemoveJob(const std::string& job_id) const {
  if (!IsPathComponent(job_id)) return;
  std::error_code ec;
  fs::remove_all(Dir(job_id), ec);
}

absl::StatusOr<std::vector<int>> JobLogs::Ranks(
    const std::string& job_id) const {
  if (absl::Status s = Check(job_id, 0); !s.ok()) return s;
  std::vector<int> ranks;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(Dir(job_id), ec)) {
    const std::string name = e.path().filename().string();
    int rank;
    if (absl::StartsWith(name, kPrefix) && absl::EndsWith(name, kSuffix) &&
        absl::SimpleAtoi(
            absl::string_view(name).substr(
                kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size()),
            &rank) &&
        rank >= 0)
      ranks.push_back(rank);
  }
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}

absl::StatusOr<std::string> JobLogs::Read(const std::string& job_id, int rank,
                                          int64_t offset,
                                          size_t max_bytes) const {
  if (absl::Status s = Check(job_id, rank); !s.ok()) return s;
  if (offset < 0)
    return absl::InvalidArgumentError(
        absl::StrCat("log offset must be >= 0, got ", offset));
  std::ifstream in(Path(job_id, rank), std::ios::binary);
  if (!in)
    return absl::NotFoundError(
        absl::StrCat("no log of rank ", rank, " of job ", job_id));
  in.seekg(offset);
  std::string buf(max_bytes, '\0');
  in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
  buf.resize(static_cast<size_t>(std::max<std::streamsize>(0, in.gcount())));
  return buf;
}

}  // namespace frameworm::coordinator
