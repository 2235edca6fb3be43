#include "worker/run_as.h"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace frameworm {
namespace {

std::string Errno(int e) { return std::strerror(e); }

// A decimal id: digits only (no sign, no space), below (uid_t)-1.
bool Id(const std::string& text, uint32_t* out) {
  if (text.empty() || text.size() > 10) return false;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
  }
  const uint64_t v = std::stoull(text);
  if (v >= 0xffffffffull) return false;
  *out = static_cast<uint32_t>(v);
  return true;
}

// Jobs must not run as root, nor in the root group (files it may read).
absl::StatusOr<RunAsUser> NotRoot(RunAsUser u) {
  if (u.uid == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--user ", u.name, " is root: jobs would run as root"));
  }
  if (u.gid == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--user ", u.name, "'s group is root's (gid 0): jobs would reach what that group may"));
  }
  return u;
}

}  // namespace

absl::StatusOr<RunAsUser> LookUpUser(const std::string& name_or_uid) {
  if (name_or_uid.empty() || name_or_uid.size() > 256) {
    return absl::InvalidArgumentError("--user: a user name or uid of 1 to 256 characters");
  }
  if (const size_t colon = name_or_uid.find(':'); colon != std::string::npos) {
    uint32_t uid = 0, gid = 0;
    if (!Id(name_or_uid.substr(0, colon), &uid) || !Id(name_or_uid.substr(colon + 1), &gid)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--user ", name_or_uid, ": not a name, a uid, or UID:GID (decimal ids below 4294967295)"));
    }
    RunAsUser u;
    u.name = name_or_uid;
    u.uid = uid;
    u.gid = gid;
    u.numeric = true;
    return NotRoot(u);
  }
  std::vector<char> buf(16384);
  passwd pw{};
  passwd* found = nullptr;
  uint32_t uid = 0;
  const int rc = absl::SimpleAtoi(name_or_uid, &uid)
                     ? ::getpwuid_r(uid, &pw, buf.data(), buf.size(), &found)
                     : ::getpwnam_r(name_or_uid.c_str(), &pw, buf.data(), buf.size(), &found);
  if (rc != 0) {
    return absl::InternalError(absl::StrCat("--user ", name_or_uid, ": looking it up: ", Errno(rc)));
  }
  if (found == nullptr) {
    return absl::NotFoundError(absl::StrCat("--user ", name_or_uid, ": no such user"));
  }
  RunAsUser u;
  u.name = pw.pw_name;
  u.uid = pw.pw_uid;
  u.gid = pw.pw_gid;
  u.home = pw.pw_dir != nullptr ? pw.pw_dir : "";
  return NotRoot(u);
}

absl::Status DropPrivileges(const RunAsUser& user) {
  if (::geteuid() != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--user ", user.name, " needs frameworm-worker started as root (it reads --tls-dir as "
        "root, then runs as ", user.name, ")"));
  }
  if (user.uid == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--user ", user.name, " is root: jobs would run as root"));
  }
  const int groups = user.numeric ? ::setgroups(1, &user.gid)
                                  : ::initgroups(user.name.c_str(), user.gid);
  if (groups != 0) {
    return absl::InternalError(absl::StrCat("the groups of ", user.name, ": ", Errno(errno)));
  }
  if (::setgid(user.gid) != 0) {
    return absl::InternalError(absl::StrCat("setgid(", user.gid, "): ", Errno(errno)));
  }
  if (::setuid(user.uid) != 0) {
    return absl::InternalError(absl::StrCat("setuid(", user.uid, "): ", Errno(errno)));
  }
  if (::setuid(0) == 0 || ::getuid() != user.uid || ::geteuid() != user.uid) {
    return absl::InternalError(absl::StrCat("root could be regained after becoming ", user.name));
  }
  if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
    return absl::InternalError(absl::StrCat("prctl(PR_SET_DUMPABLE): ", Errno(errno)));
  }
  return absl::OkStatus();
}

absl::Status CheckKeyUnreadable(const RunAsUser& user, const std::string& key_path) {
  const int fd = ::open(key_path.c_str(), O_RDONLY | O_CLOEXEC);
  const int e = errno;
  if (fd < 0 && (e == EACCES || e == EPERM)) return absl::OkStatus();
  if (fd >= 0) {
    ::close(fd);
    return absl::FailedPreconditionError(absl::StrCat(
        "--user ", user.name, " can read ", key_path, ": the jobs it runs could read this "
        "worker's key; keep the TLS directory root's (chown -R root: DIR; chmod 700 DIR)"));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "--user ", user.name, ": cannot tell whether it can read ", key_path, " (", Errno(e),
      "); the key must stay root's alone"));
}

absl::Status CheckWorkDirOwned(const RunAsUser& user, const std::string& work_dir) {
  struct stat st;
  if (::lstat(work_dir.c_str(), &st) != 0) return absl::OkStatus();  // made by the user next
  if (!S_ISDIR(st.st_mode) || st.st_uid != user.uid) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--work-dir ", work_dir, " is not a directory of ", user.name, " (owner uid ", st.st_uid,
        "): what is in it could not be rewritten; chown -R ", user.name, user.numeric ? "" : ":",
        " ", work_dir, " or give another --work-dir"));
  }
  return absl::OkStatus();
}

}  // namespace frameworm
