// Running a worker started as root as the user its jobs run as, so that job
// code cannot read the worker's TLS key: the worker reads --tls-dir as root
// (the directory stays root's), then gives up root for good (groups, gid,
// uid; the process is made non-dumpable, so processes of that user cannot
// read its memory through /proc or ptrace) before it touches any other
// file: as root it creates, changes or follows nothing in paths the user
// controls. The work dir is then made (or must already be) the user's.
// Its trainers run as the user with the cluster CA alone (rpc/tls.h
// LoadTrainerTlsDir).
//
// Errors name the user and the step: NOT_FOUND (no such user),
// FAILED_PRECONDITION (not root; the key still readable after the drop),
// INTERNAL (a system call, with errno's text).
// Thread safety: DropPrivileges before any thread starts (setuid applies to
// the calling thread's credentials in the kernel; glibc broadcasts it, but
// gRPC's threads must not start as root).
#ifndef FRAMEWORM_WORKER_RUN_AS_H_
#define FRAMEWORM_WORKER_RUN_AS_H_

#include <sys/types.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace frameworm {

struct RunAsUser {
  std::string name;  // the passwd name, or "UID:GID"
  uid_t uid = 0;
  gid_t gid = 0;
  std::string home;  // empty for "UID:GID"
  bool numeric = false;  // "UID:GID": groups are just gid
};

// A user by name, or by number ("65534"); its primary group and home. Or
// "UID:GID", decimal numbers with no entry needed in /etc/passwd (a
// container's user): no home, no supplementary groups. INVALID_ARGUMENT
// for uid 0 or gid 0 (jobs would run as root, or in its group).
absl::StatusOr<RunAsUser> LookUpUser(const std::string& name_or_uid);

// As root: takes the user's supplementary groups, gid and uid, checks that
// root cannot be regained, and makes the process non-dumpable. Refuses
// uid 0.
absl::Status DropPrivileges(const RunAsUser& user);

// After DropPrivileges: FAILED_PRECONDITION when this process (now the
// user) can open `key_path` (links followed, as the loader does) for
// reading, or when it cannot tell (an error other than EACCES or EPERM):
// the user's jobs could read it too.
absl::Status CheckKeyUnreadable(const RunAsUser& user, const std::string& key_path);

// After DropPrivileges: FAILED_PRECONDITION when `work_dir` exists and is
// not a directory owned by the user (left by a run as another user: what is
// in it could not be rewritten), naming the chown that fixes it.
absl::Status CheckWorkDirOwned(const RunAsUser& user, const std::string& work_dir);

}  // namespace frameworm

#endif  // FRAMEWORM_WORKER_RUN_AS_H_
