// The cluster's certificate authority and the certificates it issues
// (OpenSSL's libcrypto; `frameworm-cli admin ca ...` is the user's way in).
//
// A CA directory holds ca.crt and ca.key. Issuing writes a TLS directory
// (rpc/tls.h) for one identity: ca.crt (a copy of the CA certificate),
// tls.crt and tls.key. Every certificate is ECDSA P-256 with SHA-256; its
// subject common name is "<role>:<name>" (roles: coordinator, worker, user,
// admin), which is how the coordinator knows who calls (rpc/tls.h
// CallerOf). A coordinator certificate carries the DNS name
// kCoordinatorTlsName, which every client checks (so no other certificate
// of the cluster can stand in for the coordinator), and serverAuth; a
// worker certificate carries kWorkerTlsName and both clientAuth and
// serverAuth (workers serve checkpoint copies to each other); the others
// carry clientAuth only.
//
// Files: created new (never over an existing file, never through a
// symlink), keys and certificates 0600, directories 0700.
//
// Errors: INVALID_ARGUMENT (role, name, days), ALREADY_EXISTS (a file
// would be overwritten), NOT_FOUND (no CA in the directory), INTERNAL
// (OpenSSL, with its reason), the file system's errors (errno text).
// Thread safety: free functions, no shared state.
#ifndef FRAMEWORM_RPC_CLUSTER_CA_H_
#define FRAMEWORM_RPC_CLUSTER_CA_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace frameworm {

// "coordinator", "worker", "user" or "admin"; and a name of 1 to 64
// characters from [A-Za-z0-9._-] (a worker's is its --name).
absl::Status CheckCertificateIdentity(const std::string& role, const std::string& name);

// Creates `dir` (0700, may exist empty of CA files) with a new CA valid
// for `days`.
absl::Status InitClusterCa(const std::string& dir, int days = 3650);

// Issues a certificate for role:name signed by the CA in `ca_dir` into the
// TLS directory `out_dir` (created 0700 if missing), valid for `days`.
absl::Status IssueCertificate(const std::string& ca_dir, const std::string& role,
                              const std::string& name, const std::string& out_dir,
                              int days = 825);

}  // namespace frameworm

#endif  // FRAMEWORM_RPC_CLUSTER_CA_H_
