// Who makes a call to the coordinator, as its transport authenticated it
// (rpc/tls.h CallerOf): the role and name in the caller's certificate, or
// kLocal for a plaintext connection (loopback, or a coordinator the
// operator started with --insecure), which may do anything.
//
// Thread safety: plain data.
#ifndef FRAMEWORM_COMMON_CALLER_H_
#define FRAMEWORM_COMMON_CALLER_H_

#include <string>

namespace frameworm {

struct Caller {
  // kAnonymous: a TLS client without a certificate (a trainer, which
  // proves itself with its rank's token on each call, never more).
  enum class Role { kNone, kLocal, kAdmin, kUser, kWorker, kCoordinator, kAnonymous };
  Role role = Role::kNone;  // kNone: a certificate this cluster does not know
  std::string name;         // the certificate's name; empty for kLocal

  // Job owners: a user's jobs are "user:<name>", an admin's "admin:<name>",
  // a plaintext caller's "local".
  std::string Owner() const;
  // "user alice", "worker node-1", "a plaintext caller", ...
  std::string Describe() const;
  // From a certificate's common name "<role>:<name>"; kNone if it is not
  // one of ours.
  static Caller FromCommonName(const std::string& cn);
};

}  // namespace frameworm

#endif  // FRAMEWORM_COMMON_CALLER_H_
