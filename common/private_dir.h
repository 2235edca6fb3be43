// A directory only this user may change, made or checked before files go
// into it on a filesystem other users share (a tmpfs such as /dev/shm,
// where in-memory checkpoints live): another local user must not be able
// to pre-create it, or a symlink in its place, and so read, swap or
// redirect the files.
//
// EnsurePrivateDirectory(dir): creates `dir` (0700, parents as needed) when
// missing; then `dir` itself must be a directory (not a symlink) owned by
// this process's effective uid, writable by nobody else (no group/other
// write bit). FAILED_PRECONDITION naming the problem otherwise; INTERNAL
// for filesystem errors. Thread safety: a free function.
#ifndef FRAMEWORM_COMMON_PRIVATE_DIR_H_
#define FRAMEWORM_COMMON_PRIVATE_DIR_H_

#include <string>

#include "absl/status/status.h"

namespace frameworm {

absl::Status EnsurePrivateDirectory(const std::string& dir);

}  // namespace frameworm

#endif  // FRAMEWORM_COMMON_PRIVATE_DIR_H_
