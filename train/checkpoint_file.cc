#include "train/checkpoint_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace frameworm {
namespace {

constexpr char kMagic[8] = {'F', 'W', 'C', 'K', 'P', 'T', '0', '1'};
constexpr size_t kHeader = 24;

uint32_t Crc(const std::string& s) {
  uLong c = crc32(0L, Z_NULL, 0);
  size_t off = 0;
  while (off < s.size()) {
    const size_t n = std::min<size_t>(s.size() - off, 1u << 30);
    c = crc32(c, reinterpret_cast<const Bytef*>(s.data() + off),
              static_cast<uInt>(n));
    off += n;
  }
  return static_cast<uint32_t>(c);
}

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

absl::Status WriteAll(int fd, const char* p, size_t n, const std::string& path) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return Errno("write", path);
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CheckpointFileInfo> WriteCheckpointFile(
    const std::string& path, const std::string& payload) {
  const std::string dir = DirName(path);
  MakeDirs(dir);
  const std::string tmp =
      absl::StrCat(path, ".tmp.", static_cast<long>(::getpid()));
  const uint32_t crc = Crc(payload);
  char header[kHeader] = {};
  std::memcpy(header, kMagic, 8);
  PutLE(header + 8, payload.size(), 8);
  PutLE(header + 16, crc, 4);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("cannot create", tmp);
  absl::Status s = WriteAll(fd, header, kHeader, tmp);
  if (s.ok()) s = WriteAll(fd, payload.data(), payload.size(), tmp);
  if (s.ok() && ::fsync(fd) != 0) s = Errno("fsync", tmp);
  if (::close(fd) != 0 && s.ok()) s = Errno("close", tmp);
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    s = Errno(absl::StrCat("rename ", tmp, " ->"), path);
  }
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return Errno("cannot open directory", dir);
  if (::fsync(dfd) != 0) {
    ::close(dfd);
    return Errno("fsync directory", dir);
  }
  ::close(dfd);
  CheckpointFileInfo info;
  info.bytes = static_cast<int64_t>(kHeader + payload.size());
  info.checksum = absl::StrFormat("crc32:%08x", crc);
  return info;
}

absl::StatusOr<std::string> ReadCheckpointFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) {
      return absl::NotFoundError(absl::StrCat("checkpoint ", path, " does not exist"));
    }
    return Errno("cannot open checkpoint", path);
  }
  std::string all;
  char buf[1 << 16];
  while (true) {
    ssize_t r = ::read(fd, buf, sizeof(buf));
    if (r < 0) {
      if (errno == EINTR) continue;
      absl::Status s = Errno("read", path);
      ::close(fd);
      return s;
    }
    if (r == 0) break;
    all.append(buf, static_cast<size_t>(r));
  }
  ::close(fd);
  if (all.size() < kHeader) {
    return absl::DataLossError(absl::StrCat(
        "checkpoint ", path, " is truncated: ", all.size(),
        " bytes, shorter than the ", kHeader, "-byte header"));
  }
  if (std::memcmp(all.data(), kMagic, 8) != 0) {
    return absl::DataLossError(absl::StrCat(
        "checkpoint ", path, " is not a frameworm checkpoint (bad magic)"));
  }
  const uint64_t len = GetLE(all.data() + 8, 8);
  const uint32_t stored = static_cast<uint32_t>(GetLE(all.data() + 16, 4));
  const uint64_t have = all.size() - kHeader;
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
  std::string payload = all.substr(kHeader);
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
