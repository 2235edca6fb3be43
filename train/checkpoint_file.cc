#include "train/checkpoint_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <exception>
#include <string>
#include <system_error>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/crc32.h"
#include "common/received_file.h"

namespace frameworm {
namespace {

constexpr char kMagic[8] = {'F', 'W', 'C', 'K', 'P', 'T', '0', '1'};
constexpr size_t kHeader = 24;

uint32_t Crc(const std::string& s) { return Crc32(0, s.data(), s.size()); }

void PutLE(char* p, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
uint64_t GetLE(const char* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= uint64_t(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

// A full disk, quota or file-size limit is RESOURCE_EXHAUSTED (the trainer
// skips that checkpoint and trains on); anything else UNAVAILABLE.
absl::Status Errno(const std::string& what, const std::string& path) {
  const int e = errno;
  std::string text = absl::StrCat(what, " ", path, ": ", std::strerror(e));
  if (e == ENOSPC || e == EDQUOT || e == EFBIG) return absl::ResourceExhaustedError(text);
  return absl::UnavailableError(text);
}

// POSIX only: libtorch.so exports broken copies of some std::filesystem
// symbols (e.g. remove_all), so nothing here uses std::filesystem.
std::string DirName(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

void MakeDirs(const std::string& dir) {
  for (size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos == dir.size() || dir[pos] == '/') {
      ::mkdir(dir.substr(0, pos).c_str(), 0755);
    }
  }
}

}  // namespace

constexpr size_t kWriteBuffer = 8 << 20;
constexpr size_t kMaxQueued = 3;
constexpr size_t kDirectAlign = 4096;

CheckpointFileWriter::CheckpointFileWriter(std::string path, std::string tmp, int fd,
                                           int direct_fd)
    : path_(std::move(path)), tmp_(std::move(tmp)), fd_(fd), direct_fd_(direct_fd), crc_(0) {}

CheckpointFileWriter::Buffer CheckpointFileWriter::TakeBuffer() {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!spare_.empty()) {
      Buffer b = std::move(spare_.back());
      spare_.pop_back();
      b.size = 0;
      return b;
    }
  }
  Buffer b;
  void* p = nullptr;
  if (::posix_memalign(&p, kDirectAlign, kWriteBuffer) == 0) b.data.reset(static_cast<char*>(p));
  return b;
}

absl::StatusOr<std::unique_ptr<CheckpointFileWriter>> CheckpointFileWriter::Open(
    const std::string& path) {
  MakeDirs(DirName(path));
  const std::string tmp = absl::StrCat(path, ".tmp.", static_cast<long>(::getpid()));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return Errno("cannot create", tmp);
  // -1 where the filesystem refuses O_DIRECT: then every write is buffered.
  const int direct = ::open(tmp.c_str(), O_WRONLY | O_DIRECT | O_CLOEXEC | O_NOFOLLOW);
  std::unique_ptr<CheckpointFileWriter> w(new CheckpointFileWriter(path, tmp, fd, direct));
  w->buf_ = w->TakeBuffer();
  if (w->buf_.data == nullptr) {
    w->status_ = absl::ResourceExhaustedError(
        absl::StrCat("no memory for the write buffers of ", tmp));
    return w->status_;
  }
  // The header's place; its length and checksum are known at Commit.
  std::memset(w->buf_.data.get(), 0, kHeader);
  w->buf_.size = kHeader;
  try {
    w->writer_ = std::thread([p = w.get()] { p->WriterLoop(); });
  } catch (const std::system_error& e) {  // a process limit: the temp file goes with w
    // Not RESOURCE_EXHAUSTED: callers take that for a full disk.
    w->status_ = absl::UnavailableError(absl::StrCat("no thread to write ", tmp, ": ", e.what()));
    return w->status_;
  }
  return w;
}

CheckpointFileWriter::~CheckpointFileWriter() {
  (void)Drain();
  if (direct_fd_ >= 0) ::close(direct_fd_);
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_.c_str());
}

absl::Status CheckpointFileWriter::WriteBuffer(const Buffer& b) {
  const char* p = b.data.get();
  size_t n = b.size;
  uint64_t off = b.offset;
  auto write_through = [&](int fd, size_t len) -> absl::Status {
    while (len > 0) {
      const ssize_t w = ::pwrite(fd, p, len, static_cast<off_t>(off));
      if (w < 0) {
        if (errno == EINTR) continue;
        return Errno("write", tmp_);
      }
      if (w == 0) {
        errno = EIO;
        return Errno("write", tmp_);
      }
      p += w;
      off += static_cast<uint64_t>(w);
      n -= static_cast<size_t>(w);
      len -= static_cast<size_t>(w);
      // A short direct write leaves the rest unaligned: buffered from here.
      if (fd == direct_fd_ && len > 0) return absl::OkStatus();
    }
    return absl::OkStatus();
  };
  if (direct_fd_ >= 0 && off % kDirectAlign == 0) {
    const size_t aligned = n / kDirectAlign * kDirectAlign;
    if (aligned > 0) {
      absl::Status s = write_through(direct_fd_, aligned);
      if (!s.ok()) return s;
    }
  }
  return write_through(fd_, n);
}

void CheckpointFileWriter::WriterLoop() {
  std::unique_lock<std::mutex> l(mu_);
  while (true) {
    cv_.wait(l, [&] { return !full_.empty() || closing_; });
    if (full_.empty()) return;  // closing, everything written
    Buffer b = std::move(full_.front());
    full_.pop_front();
    const bool skip = !write_status_.ok();  // after an error: discard
    l.unlock();
    absl::Status s = skip ? absl::OkStatus() : WriteBuffer(b);
    l.lock();
    if (!s.ok() && write_status_.ok()) write_status_ = s;
    spare_.push_back(std::move(b));
    cv_.notify_all();
  }
}

absl::Status CheckpointFileWriter::Submit(bool refill) {
  {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return full_.size() < kMaxQueued || !write_status_.ok(); });
    if (!write_status_.ok()) {
      status_ = write_status_;
      return status_;
    }
    const uint64_t next = buf_.offset + buf_.size;
    full_.push_back(std::move(buf_));
    cv_.notify_all();
    buf_ = Buffer();
    buf_.offset = next;
  }
  if (!refill) return absl::OkStatus();
  Buffer fresh = TakeBuffer();
  if (fresh.data == nullptr) {
    status_ = absl::ResourceExhaustedError(
        absl::StrCat("no memory for the write buffers of ", tmp_));
    return status_;
  }
  fresh.offset = buf_.offset;
  buf_ = std::move(fresh);
  return absl::OkStatus();
}

absl::Status CheckpointFileWriter::Drain() {
  if (!writer_.joinable()) return status_;
  if (status_.ok() && buf_.size > 0) (void)Submit(/*refill=*/false);  // the last one
  {
    std::lock_guard<std::mutex> l(mu_);
    closing_ = true;
  }
  cv_.notify_all();
  writer_.join();
  std::lock_guard<std::mutex> l(mu_);
  if (status_.ok()) status_ = write_status_;
  return status_;
}

absl::Status CheckpointFileWriter::Append(const void* data, size_t n) {
  if (!status_.ok()) return status_;
  const char* p = static_cast<const char*>(data);
  length_ += n;
  crc_ = Crc32(static_cast<uint32_t>(crc_), p, n);
  while (n > 0) {
    const size_t k = std::min(n, kWriteBuffer - buf_.size);
    std::memcpy(buf_.data.get() + buf_.size, p, k);
    buf_.size += k;
    p += k;
    n -= k;
    if (buf_.size == kWriteBuffer && !Submit().ok()) return status_;
  }
  return absl::OkStatus();
}

absl::StatusOr<CheckpointFileInfo> CheckpointFileWriter::Commit() {
  if (!Drain().ok()) return status_;
  char header[kHeader] = {};
  std::memcpy(header, kMagic, 8);
  PutLE(header + 8, length_, 8);
  PutLE(header + 16, static_cast<uint32_t>(crc_), 4);
  absl::Status s;
  if (::pwrite(fd_, header, kHeader, 0) != static_cast<ssize_t>(kHeader)) {
    s = Errno("write header", tmp_);
  }
  if (s.ok() && ::fsync(fd_) != 0) s = Errno("fsync", tmp_);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0 && s.ok()) s = Errno("close", tmp_);
  if (s.ok() && ::rename(tmp_.c_str(), path_.c_str()) != 0) {
    s = Errno(absl::StrCat("rename ", tmp_, " ->"), path_);
  }
  if (!s.ok()) {
    status_ = s;
    return s;  // the destructor removes the temporary file
  }
  committed_ = true;
  const std::string dir = DirName(path_);
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return Errno("cannot open directory", dir);
  if (::fsync(dfd) != 0) {
    absl::Status e = Errno("fsync directory", dir);
    ::close(dfd);
    return e;
  }
  ::close(dfd);
  CheckpointFileInfo info;
  info.bytes = static_cast<int64_t>(kHeader + length_);
  // The whole file's CRC (header, then payload), so any copy of the file is
  // checked against it byte for byte (common/received_file.h).
  const uLong whole = crc32_combine(Crc32(0, header, kHeader), crc_,
                                    static_cast<z_off_t>(length_));
  info.checksum = Crc32Text(static_cast<uint32_t>(whole));
  return info;
}

absl::StatusOr<CheckpointFileInfo> WriteCheckpointFile(
    const std::string& path, const std::string& payload) {
  auto w = CheckpointFileWriter::Open(path);
  if (!w.ok()) return w.status();
  absl::Status s = (*w)->Append(payload.data(), payload.size());
  if (!s.ok()) return s;
  return (*w)->Commit();
}

namespace {

bool AllDigits(const std::string& s, size_t max_size) {
  return !s.empty() && s.size() <= max_size && s.find_first_not_of("0123456789") == std::string::npos;
}

// The pid of the process that writes `name`, one of a checkpoint's
// temporary names (`<ckpt>.tmp.<pid>`, `<ckpt>.download-<pid>`,
// `<ckpt>.refetch-<pid>`, `<ckpt>.rank<r>-<pid>`); 0 for any other name.
pid_t WriterOf(const std::string& name) {
  for (const char* marker : {".tmp.", ".download-", ".refetch-"}) {
    const size_t at = name.rfind(marker);
    if (at == std::string::npos || at == 0) continue;
    const std::string pid_text = name.substr(at + std::strlen(marker));
    if (AllDigits(pid_text, 9)) return static_cast<pid_t>(std::stol(pid_text));
  }
  const size_t at = name.rfind(".rank");
  if (at == std::string::npos || at == 0) return 0;
  const std::string rest = name.substr(at + 5);  // <r>-<pid>
  const size_t dash = rest.find('-');
  if (dash == std::string::npos || !AllDigits(rest.substr(0, dash), 9) ||
      !AllDigits(rest.substr(dash + 1), 9)) {
    return 0;
  }
  return static_cast<pid_t>(std::stol(rest.substr(dash + 1)));
}

}  // namespace

int RemoveStaleCheckpointTemps(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return 0;
  int removed = 0;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    const pid_t pid = WriterOf(name);
    if (pid == ::getpid() || pid <= 0) continue;
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;  // its writer may still run
    const std::string full = dir + "/" + name;
    struct stat st;
    if (::lstat(full.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (::unlink(full.c_str()) == 0) ++removed;
  }
  ::closedir(d);
  return removed;
}

namespace {

// Reads up to n bytes at `at` (fewer only at the end of the file): the
// count, or -1 with errno set.
ssize_t ReadUpTo(int fd, char* at, size_t n) {
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::read(fd, at + got, n - got);
    if (r < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  return static_cast<ssize_t>(got);
}

}  // namespace

absl::StatusOr<std::string> ReadCheckpointFile(const std::string& path) {
  // O_NONBLOCK: opening a FIFO waits for no writer (it is then refused as
  // not a regular file); reads of a regular file do not change.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) {
      return absl::NotFoundError(absl::StrCat("checkpoint ", path, " does not exist"));
    }
    return Errno("cannot open checkpoint", path);
  }
  const absl::Cleanup close_fd = [fd] { ::close(fd); };
  struct stat st;
  if (::fstat(fd, &st) != 0) return Errno("fstat", path);
  // Not a device or a pipe (/dev/zero would be read until memory ran out).
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint ", path, " is not a regular file"));
  }
  // The header first: nothing more is read, or allocated, from a file that
  // is not a checkpoint or whose size disagrees with its header.
  char header[kHeader];
  const ssize_t h = ReadUpTo(fd, header, kHeader);
  if (h < 0) return Errno("read", path);
  if (static_cast<size_t>(h) < kHeader) {
    return absl::DataLossError(absl::StrCat(
        "checkpoint ", path, " is truncated: ", h,
        " bytes, shorter than the ", kHeader, "-byte header"));
  }
  if (std::memcmp(header, kMagic, 8) != 0) {
    return absl::DataLossError(absl::StrCat(
        "checkpoint ", path, " is not a frameworm checkpoint (bad magic)"));
  }
  const uint64_t len = GetLE(header + 8, 8);
  const uint32_t stored = static_cast<uint32_t>(GetLE(header + 16, 4));
  const uint64_t have = static_cast<uint64_t>(st.st_size) - kHeader;
  if (have < len) {
    return absl::DataLossError(absl::StrCat(
        "checkpoint ", path, " is truncated: header announces ", len,
        " payload bytes, file holds ", have));
  }
  if (have > len) {
    return absl::DataLossError(absl::StrCat(
        "checkpoint ", path, " has ", have - len,
        " unexpected bytes after the payload"));
  }
  // Exactly the payload, read once into the string returned (no second
  // copy of a checkpoint of several GB); one byte more tells whether the
  // file changed size since fstat.
  std::string payload;
  try {
    payload.assign(len + 1, '\0');
  } catch (const std::exception&) {  // bad_alloc, length_error: larger than this host's memory
    return absl::ResourceExhaustedError(absl::StrCat(
        "checkpoint ", path, " holds ", len, " payload bytes, more than this host can allocate"));
  }
  const ssize_t got = ReadUpTo(fd, payload.data(), len + 1);
  if (got < 0) return Errno("read", path);
  if (static_cast<uint64_t>(got) < len) {
    return absl::DataLossError(absl::StrCat(
        "checkpoint ", path, " is truncated: header announces ", len,
        " payload bytes, file holds ", got));
  }
  if (static_cast<uint64_t>(got) > len) {
    return absl::DataLossError(
        absl::StrCat("checkpoint ", path, " has unexpected bytes after the payload"));
  }
  payload.resize(len);
  const uint32_t crc = Crc(payload);
  if (crc != stored) {
    return absl::DataLossError(absl::StrFormat(
        "checkpoint %s is corrupt: checksum mismatch (stored crc32:%08x, "
        "computed crc32:%08x)",
        path, stored, crc));
  }
  return payload;
}

}  // namespace frameworm
