#include "coordinator/checkpoint_copies.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace frameworm::coordinator {
namespace fs = std::filesystem;

std::string CheckpointCopies::FileOf(const std::string& job_id, int64_t step) const {
  return absl::StrCat(root_, "/", job_id, "/ckpt-", step, ".pt");
}

absl::StatusOr<std::unique_ptr<ReceivedFile>> CheckpointCopies::Begin(
    const std::string& job_id, int64_t step, int64_t total_bytes) const {
  if (absl::Status s = CheckJobIdComponent(job_id); !s.ok()) return s;
  if (step < 0) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint step must be >= 0, got ", step));
  }
  if (total_bytes < 0 || total_bytes > max_bytes_) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint of ", total_bytes,
                                                   " bytes: the coordinator keeps at most ",
                                                   max_bytes_, " bytes per checkpoint"));
  }
  return ReceivedFile::Create(FileOf(job_id, step), total_bytes);
}

absl::StatusOr<std::string> CheckpointCopies::PathOf(const std::string& job_id,
                                                     int64_t step) const {
  if (absl::Status s = CheckJobIdComponent(job_id); !s.ok()) return s;
  const std::string f = FileOf(job_id, step);
  std::error_code ec;
  if (!fs::is_regular_file(f, ec)) {
    return absl::NotFoundError(absl::StrCat("the coordinator holds no copy of ", job_id,
                                            "'s checkpoint of step ", step));
  }
  return f;
}

void CheckpointCopies::Remove(const std::string& job_id, int64_t step) const {
  if (!CheckJobIdComponent(job_id).ok()) return;
  std::error_code ec;
  fs::remove(FileOf(job_id, step), ec);
  fs::remove(FileOf(job_id, step) + ".damaged", ec);
}

absl::Status CheckpointCopies::MarkDamaged(const std::string& job_id, int64_t step,
                                           int64_t generation) const {
  if (absl::Status s = CheckJobIdComponent(job_id); !s.ok()) return s;
  const std::string mark = FileOf(job_id, step) + ".damaged";
  // A partial name (RemovePartials removes one a crash left).
  const std::string tmp = absl::StrCat(FileOf(job_id, step), ".partial-mark-", PartialTag());
  const std::string text = absl::StrCat(generation, "\n");
  absl::Status marked = absl::OkStatus();
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    marked = absl::InternalError(absl::StrCat("cannot write ", tmp, ": ", std::strerror(errno)));
  } else {
    const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
                    ::fsync(fd) == 0;
    ::close(fd);
    std::error_code ec;
    if (ok) fs::rename(tmp, mark, ec);
    if (!ok || ec) {
      marked = absl::InternalError(absl::StrCat("cannot write ", mark, ": ",
                                                ok ? ec.message() : std::strerror(errno)));
      fs::remove(tmp, ec);
    }
  }
  // The copy goes whether or not the mark was written: a damaged copy left
  // in place would be judged again by every later generation.
  std::error_code ec;
  fs::remove(FileOf(job_id, step), ec);
  return marked;
}

absl::StatusOr<int64_t> CheckpointCopies::DamagedIn(const std::string& job_id,
                                                    int64_t step) const {
  if (!CheckJobIdComponent(job_id).ok()) return -1;
  const std::string mark = FileOf(job_id, step) + ".damaged";
  const int fd = ::open(mark.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) return -1;
  char buf[32];
  ssize_t n = -1;
  if (fd >= 0) {
    do {
      n = ::read(fd, buf, sizeof(buf));
    } while (n < 0 && errno == EINTR);
  }
  const int e = errno;
  if (fd >= 0) ::close(fd);
  if (n < 0) {
    // Only a passing failure is worth waiting for; a mark that can never be
    // read (a directory, a link) is no mark, or its record could never be
    // dropped.
    if (e == EMFILE || e == ENFILE || e == ENOMEM || e == EIO || e == EAGAIN) {
      return absl::UnavailableError(absl::StrCat("cannot read ", mark, ": ", std::strerror(e)));
    }
    return -1;
  }
  absl::string_view text(buf, static_cast<size_t>(n));
  int64_t generation = -1;
  if (!absl::ConsumeSuffix(&text, "\n") || !absl::SimpleAtoi(text, &generation) ||
      generation < 0) {
    return -1;  // torn or foreign: no mark
  }
  return generation;
}

void CheckpointCopies::RemoveAllBut(const std::string& job_id,
                                    const std::set<int64_t>& keep) const {
  if (!CheckJobIdComponent(job_id).ok()) return;
  std::error_code ec;
  for (fs::directory_iterator it(fs::path(root_) / job_id, ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    int64_t step = 0;
    if (!absl::StartsWith(name, "ckpt-") || !absl::EndsWith(name, ".pt") ||
        !absl::SimpleAtoi(name.substr(5, name.size() - 8), &step) || keep.count(step) ||
        name != absl::StrCat("ckpt-", step, ".pt")) {
      continue;
    }
    std::error_code rm;
    fs::remove(it->path(), rm);
  }
}

void CheckpointCopies::RemovePartials() const {
  std::error_code ec;
  for (fs::directory_iterator job(root_, ec), end; !ec && job != end; job.increment(ec)) {
    std::error_code in;
    if (!job->is_directory(in)) continue;
    for (fs::directory_iterator it(job->path(), in); !in && it != end; it.increment(in)) {
      const std::string name = it->path().filename().string();
      if (!absl::StartsWith(name, "ckpt-") || name.find(".pt.partial-") == std::string::npos) {
        continue;
      }
      std::error_code rm;
      fs::remove(it->path(), rm);
    }
  }
}

void CheckpointCopies::RemoveJob(const std::string& job_id) const {
  if (!CheckJobIdComponent(job_id).ok()) return;
  std::error_code ec;
  fs::remove_all(fs::path(root_) / job_id, ec);
}

}  // namespace frameworm::coordinator
