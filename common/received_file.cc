#include "common/received_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/printable.h"
#include "common/crc32.h"
#include "common/disk_reservation.h"
#include "common/token.h"

namespace frameworm {
namespace fs = std::filesystem;

std::string Crc32Text(uint32_t crc) { return absl::StrFormat("crc32:%08x", crc); }

bool IsCrc32Text(const std::string& text) {
  if (text.size() != 14 || text.compare(0, 6, "crc32:") != 0) return false;
  // Lower-case only, as Crc32Text writes it: every copy is compared with
  // that text, so "crc32:ABCD0123" would fail every check after the copy.
  return std::all_of(text.begin() + 6, text.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
  });
}

uint32_t UpdateCrc32(uint32_t crc, const std::string& data) {
  return Crc32(crc, data.data(), data.size());
}

namespace {

// Opens `path` for reading without blocking on a FIFO or device (and, with
// `no_follow`, without following a final symlink); -1 unless it is a
// regular file. *size: its size.
int OpenRegularFile(const std::string& path, bool no_follow, int64_t* size) {
  const int fd = ::open(path.c_str(),
                        O_RDONLY | O_NONBLOCK | O_CLOEXEC | (no_follow ? O_NOFOLLOW : 0));
  if (fd < 0) return -1;
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return -1;
  }
  *size = static_cast<int64_t>(st.st_size);
  return fd;
}

// The size and CRC-32 text of what `fd` reads to its end; closes it.
absl::StatusOr<std::pair<int64_t, std::string>> ChecksumAndClose(int fd, const std::string& path) {
  uint32_t crc = 0;
  std::string buf(1 << 20, '\0');
  int64_t total = 0;
  ssize_t n = 0;
  while ((n = ::read(fd, buf.data(), buf.size())) != 0) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    crc = Crc32(crc, buf.data(), static_cast<size_t>(n));
    total += n;
  }
  ::close(fd);
  if (n < 0) return absl::InternalError(absl::StrCat("reading ", path, " failed"));
  return std::make_pair(total, Crc32Text(crc));
}

}  // namespace

absl::StatusOr<std::pair<int64_t, std::string>> FileChecksum(const std::string& path) {
  int64_t size = 0;
  const int fd = OpenRegularFile(path, /*no_follow=*/false, &size);
  if (fd < 0) return absl::NotFoundError(absl::StrCat("cannot open ", path, " as a regular file"));
  return ChecksumAndClose(fd, path);
}

bool FileMatches(const std::string& path, int64_t bytes, const std::string& checksum) {
  int64_t size = 0;
  const int fd = OpenRegularFile(path, /*no_follow=*/true, &size);
  if (fd < 0) return false;
  if (size != bytes) {
    ::close(fd);
    return false;
  }
  absl::StatusOr<std::pair<int64_t, std::string>> sum = ChecksumAndClose(fd, path);
  return sum.ok() && sum->first == bytes && sum->second == checksum;
}

absl::Status CheckJobIdComponent(const std::string& id) {
  if (!IsPlainName(id)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job id '", PrintableLine(id, 80), "' is not 1-64 characters of [A-Za-z0-9_.-]"));
  }
  return absl::OkStatus();
}

const std::string& PartialTag() {
  static const std::string tag = absl::StrCat(::getpid(), ".", NewToken().substr(0, 8));
  return tag;
}

absl::StatusOr<std::unique_ptr<ReceivedFile>> ReceivedFile::Create(const std::string& path,
                                                                   int64_t expected_bytes,
                                                                   int64_t keep_free) {
  if (expected_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("a file of ", expected_bytes, " bytes was announced"));
  }
  static std::atomic<uint64_t> counter{0};
  auto in = std::unique_ptr<ReceivedFile>(new ReceivedFile());
  in->final_ = path;
  in->partial_ = absl::StrCat(path, ".partial-", PartialTag(), "-", counter.fetch_add(1));
  in->expected_ = expected_bytes;
  in->crc_ = 0;
  std::error_code ec;
  // A bare file name lies in the working directory (create_directories
  // refuses an empty path).
  const fs::path parent = fs::path(path).parent_path();
  const fs::path dir = parent.empty() ? fs::path(".") : parent;
  if (!parent.empty()) fs::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir.string(), ": ", ec.message()));
  absl::StatusOr<std::unique_ptr<DiskReservation>> room = DiskReservation::Take(
      dir.string(), expected_bytes, fs::path(path).filename().string(), keep_free);
  if (!room.ok()) return room.status();
  in->room_ = *std::move(room);
  in->fd_ = ::open(in->partial_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                   0600);
  if (in->fd_ < 0) {
    return absl::InternalError(
        absl::StrCat("cannot create ", in->partial_, ": ", std::strerror(errno)));
  }
  return in;
}

ReceivedFile::~ReceivedFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) {
    std::error_code ec;
    fs::remove(partial_, ec);
  }
}

absl::Status ReceivedFile::Append(const std::string& data) {
  if (fd_ < 0) return absl::FailedPreconditionError("the transfer already ended");
  if (written_at_.load() != 0) return absl::FailedPreconditionError("the file is written in ranges");
  if (static_cast<int64_t>(data.size()) > kMaxChunkBytes) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint chunk of ", data.size(),
                                                   " bytes; at most ", kMaxChunkBytes));
  }
  if (received_ + static_cast<int64_t>(data.size()) > expected_) {
    return absl::InvalidArgumentError(
        absl::StrCat("the sender sent more than the ", expected_, " bytes it declared"));
  }
  for (size_t done = 0; done < data.size();) {
    const ssize_t n = ::write(fd_, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return absl::InternalError(absl::StrCat("writing ", partial_, ": ", std::strerror(errno)));
    }
    done += static_cast<size_t>(n);
  }
  crc_ = UpdateCrc32(crc_, data);
  received_ += static_cast<int64_t>(data.size());
  room_->Used(static_cast<int64_t>(data.size()));
  return absl::OkStatus();
}

absl::Status ReceivedFile::WriteAt(int64_t offset, const char* data, size_t n) {
  if (fd_ < 0) return absl::FailedPreconditionError("the transfer already ended");
  if (received_ != 0) return absl::FailedPreconditionError("the file is written in order");
  if (static_cast<int64_t>(n) > kMaxChunkBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint chunk of ", n, " bytes; at most ", kMaxChunkBytes));
  }
  if (offset < 0 || offset > expected_ || static_cast<int64_t>(n) > expected_ - offset) {
    return absl::InvalidArgumentError(absl::StrCat("bytes [", offset, ", ", offset, " + ", n,
                                                   ") are outside the ", expected_,
                                                   " bytes declared"));
  }
  for (size_t done = 0; done < n;) {
    const ssize_t w = ::pwrite(fd_, data + done, n - done, offset + static_cast<int64_t>(done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      return absl::InternalError(absl::StrCat("writing ", partial_, ": ", std::strerror(errno)));
    }
    done += static_cast<size_t>(w);
  }
  written_at_ += static_cast<int64_t>(n);
  room_->Used(static_cast<int64_t>(n));
  return absl::OkStatus();
}

absl::Status ReceivedFile::CommitRanges(uint32_t crc, const std::string& checksum) {
  if (received_ != 0) return absl::FailedPreconditionError("the file was written in order");
  return Finish(written_at_.load(), crc, checksum);
}

absl::Status ReceivedFile::Commit(const std::string& checksum) {
  if (written_at_.load() != 0) return absl::FailedPreconditionError("the file was written in ranges");
  return Finish(received_, crc_, checksum);
}

absl::Status ReceivedFile::Finish(int64_t written, uint32_t crc, const std::string& checksum) {
  if (fd_ < 0) return absl::FailedPreconditionError("the transfer already ended");
  if (written != expected_) {
    return absl::InvalidArgumentError(absl::StrCat("the transfer ended after ", written,
                                                   " of the ", expected_, " bytes declared"));
  }
  if (checksum != Crc32Text(crc)) {
    return absl::InvalidArgumentError(absl::StrCat("checksum '", PrintableLine(checksum, 40),
                                                   "' does not match ", Crc32Text(crc),
                                                   " of the bytes received"));
  }
  const bool flushed = ::fsync(fd_) == 0;
  ::close(fd_);
  fd_ = -1;
  if (!flushed) return absl::InternalError(absl::StrCat("flushing ", partial_, " failed"));
  std::error_code ec;
  fs::rename(partial_, final_, ec);
  if (ec) return absl::InternalError(absl::StrCat("renaming to ", final_, ": ", ec.message()));
  committed_ = true;
  const int dir = ::open(fs::path(final_).parent_path().c_str(), O_RDONLY | O_DIRECTORY);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
  return absl::OkStatus();
}

}  // namespace frameworm
