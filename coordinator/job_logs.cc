#include "coordinator/job_logs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <cstdint>
#include <filesystem>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/log_cap.h"
#include "common/printable.h"

namespace frameworm::coordinator {
namespace {

namespace fs = std::filesystem;

constexpr absl::string_view kPrefix = "rank-";
constexpr absl::string_view kSuffix = ".log";
constexpr absl::string_view kEndsSuffix = ".ends";

// A slot of the .ends file: "<generation> <stream> <end>\n", each number
// 20 digits, the stream padded to 6: 49 bytes. Slot index: the
// generation's parity x 2 + (stderr ? 1 : 0).
constexpr size_t kSlotBytes = 49;
constexpr int kSlots = 4;

int SlotOf(int64_t generation, const std::string& stream) {
  return static_cast<int>(generation % 2) * 2 + (stream == "stderr" ? 1 : 0);
}

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

std::string JobLogs::EndsPath(const std::string& job_id, int rank) const {
  return (fs::path(Dir(job_id)) / absl::StrCat(kPrefix, rank, kEndsSuffix)).string();
}

void JobLogs::LoadEndsLocked(const std::string& job_id, int rank) const {
  if (!loaded_.emplace(job_id, rank).second) return;
  const std::string path = EndsPath(job_id, rank);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return;  // none yet
  char buf[kSlotBytes * kSlots];
  ssize_t n;
  do {
    n = ::pread(fd, buf, sizeof(buf), 0);
  } while (n < 0 && errno == EINTR);
  ::close(fd);
  for (int slot = 0; n > 0 && (slot + 1) * kSlotBytes <= static_cast<size_t>(n); ++slot) {
    const std::vector<absl::string_view> f = absl::StrSplit(
        absl::string_view(buf + slot * kSlotBytes, kSlotBytes - 1), ' ', absl::SkipEmpty());
    int64_t generation = -1, end = -1;
    if (f.size() != 3 || !absl::SimpleAtoi(f[0], &generation) ||
        !absl::SimpleAtoi(f[2], &end) || generation < 0 || end < 0 ||
        (f[1] != "stdout" && f[1] != "stderr") || SlotOf(generation, std::string(f[1])) != slot) {
      continue;  // empty, torn or foreign: that source's resends are written again
    }
    int64_t& known = ends_[Source{job_id, rank, generation, std::string(f[1])}];
    known = std::max(known, end);
  }
}

void JobLogs::SaveEndLocked(const std::string& job_id, int rank, int64_t generation,
                            const std::string& stream, int64_t end) const {
  const std::string path = EndsPath(job_id, rank);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return;
  const std::string slot = absl::StrFormat("%020d %-6s %020d\n", generation, stream, end);
  ssize_t n;
  do {
    n = ::pwrite(fd, slot.data(), slot.size(), SlotOf(generation, stream) * kSlotBytes);
  } while (n < 0 && errno == EINTR);
  ::close(fd);
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
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0)
    return absl::InternalError(absl::StrCat("cannot append to ", path, ": ", std::strerror(errno)));
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = errno;
      ::close(fd);
      return absl::InternalError(absl::StrCat("cannot append to ", path, ": ", std::strerror(e)));
    }
    done += static_cast<size_t>(n);
  }
  struct stat st {};
  const bool over = ::fstat(fd, &st) == 0 && options_.max_bytes_per_rank > 0 &&
                    st.st_size > options_.max_bytes_per_rank;
  ::close(fd);
  if (over) {
    absl::StatusOr<int64_t> first = CapLog(path, options_.max_bytes_per_rank);
    if (!first.ok() && !warned_.exchange(true))  // once: the file stays whole
      std::fprintf(stderr, "coordinator: %s\n", std::string(first.status().message()).c_str());
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> JobLogs::AppendAt(const std::string& job_id, int rank,
                                          int64_t generation, const std::string& stream,
                                          int64_t offset, absl::string_view data) const {
  if (absl::Status s = Check(job_id, rank); !s.ok()) return s;
  if (offset < 0 || generation < 0 ||
      (!stream.empty() && stream != "stdout" && stream != "stderr")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "log chunk with bad source: generation ", generation, ", stream '",
        PrintableLine(stream, 16), "', offset ", offset));
  }
  if (static_cast<uint64_t>(offset) > static_cast<uint64_t>(INT64_MAX) - data.size()) {
    return absl::InvalidArgumentError(absl::StrCat("log chunk offset ", offset, " overflows"));
  }
  const int64_t end = offset + static_cast<int64_t>(data.size());
  if (stream.empty()) {  // a sender that names no stream: written as it comes
    if (absl::Status s = Append(job_id, rank, data); !s.ok()) return s;
    return end;
  }
  // One writer at a time: the end is read, the file written and the end
  // moved as one step, so a resent chunk racing its first copy (an old and a
  // new session of one worker) is written once.
  absl::MutexLock l(&mu_);
  LoadEndsLocked(job_id, rank);
  const Source key{job_id, rank, generation, stream};
  auto it = ends_.find(key);
  if (it != ends_.end() && it->second >= offset) {
    if (it->second >= end) return it->second;  // all of it is here already
    data.remove_prefix(static_cast<size_t>(it->second - offset));
  }
  if (absl::Status s = Append(job_id, rank, data); !s.ok()) return s;
  // A late chunk of a generation older than the two newest (its slot is a
  // newer generation's, of the same parity) is not saved over it.
  bool superseded = false;
  for (auto g = ends_.lower_bound(Source{job_id, rank, 0, ""});
       g != ends_.end() && std::get<0>(g->first) == job_id && std::get<1>(g->first) == rank; ++g) {
    superseded = superseded || std::get<2>(g->first) > generation + 1;
  }
  if (!superseded) SaveEndLocked(job_id, rank, generation, stream, end);
  if (it != ends_.end()) {
    it->second = end;
    return end;
  }
  ends_.emplace(key, end);
  // A new source: only the two newest generations of this job and rank
  // are remembered.
  std::vector<Source> old;
  for (auto g = ends_.lower_bound(Source{job_id, rank, 0, ""});
       g != ends_.end() && std::get<0>(g->first) == job_id && std::get<1>(g->first) == rank; ++g) {
    if (std::get<2>(g->first) < generation - 1) old.push_back(g->first);
  }
  for (const Source& o : old) ends_.erase(o);
  return end;
}

void JobLogs::RemoveJob(const std::string& job_id) const {
  if (!IsPathComponent(job_id)) return;
  {
    absl::MutexLock l(&mu_);
    for (auto it = ends_.lower_bound(Source{job_id, INT32_MIN, INT64_MIN, ""});
         it != ends_.end() && std::get<0>(it->first) == job_id;) {
      it = ends_.erase(it);
    }
    for (auto it = loaded_.lower_bound({job_id, INT32_MIN});
         it != loaded_.end() && it->first == job_id;) {
      it = loaded_.erase(it);
    }
  }
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

absl::StatusOr<JobLogs::Chunk> JobLogs::Read(const std::string& job_id, int rank,
                                             int64_t offset, size_t max_bytes) const {
  if (absl::Status s = Check(job_id, rank); !s.ok()) return s;
  if (offset < 0)
    return absl::InvalidArgumentError(
        absl::StrCat("log offset must be >= 0, got ", offset));
  const int fd = ::open(Path(job_id, rank).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return absl::NotFoundError(
        absl::StrCat("no log of rank ", rank, " of job ", job_id));
  Chunk chunk;
  chunk.from = FirstKept(fd, offset);
  chunk.data.resize(max_bytes);
  ssize_t n;
  do {
    n = ::pread(fd, chunk.data.data(), max_bytes, chunk.from);
  } while (n < 0 && errno == EINTR);
  ::close(fd);
  chunk.data.resize(static_cast<size_t>(std::max<ssize_t>(0, n)));
  return chunk;
}

}  // namespace frameworm::coordinator
