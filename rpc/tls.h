// TLS material of one process and what gRPC makes of it.
//
// A TLS directory (made by `frameworm-cli admin ca issue`, rpc/cluster_ca.h)
// holds ca.crt (the cluster CA: the only issuer trusted), tls.crt (this
// process's certificate, CN "<role>:<name>") and tls.key (its key, which
// must not be readable by group or others). The coordinator serves with
// its own and requires a client certificate from the same CA on every
// connection; clients (workers, trainers, the CLI) present theirs and
// accept only a server certificate of the cluster CA carrying the DNS name
// kCoordinatorTlsName, whatever address they dial. Workers also serve their
// peers with their own certificate (DNS name kWorkerTlsName).
//
// Trainers hold no certificate: their worker hands them a directory with
// ca.crt alone (LoadTrainerTlsDir), so job code never holds a cluster key;
// the coordinator's API server takes such clients (ServerCredentials'
// `client_certificate_optional`) as kAnonymous callers, which may only
// make trainer calls, each carrying its rank's token.
//
// LoadTlsDir checks what a handshake would otherwise refuse later without
// naming a file. Errors: NOT_FOUND (a file is missing, with how to make
// it), PERMISSION_DENIED (tls.key readable by others), INVALID_ARGUMENT
// (not PEM or over 1 MiB, a tls.key that is not tls.crt's key, a tls.crt
// that ca.crt did not issue), FAILED_PRECONDITION (ca.crt or tls.crt
// expired, or not valid yet: the date, and the host's clock to check).
// Thread safety: free functions.
#ifndef FRAMEWORM_RPC_TLS_H_
#define FRAMEWORM_RPC_TLS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/caller.h"
#include "common/prometheus_text.h"
#include "grpcpp/grpcpp.h"

namespace frameworm {

// The name every coordinator certificate carries and every client checks.
inline constexpr char kCoordinatorTlsName[] = "frameworm-coordinator";
// The name every worker certificate carries: a worker serves checkpoint
// copies to its peers (peer_service.proto), which check it.
inline constexpr char kWorkerTlsName[] = "frameworm-worker";

struct TlsFiles {
  std::string dir;
  std::string ca_pem, cert_pem, key_pem;
  // The earlier of ca.crt's and tls.crt's end of validity (set by
  // LoadTlsDir): from then on no handshake with this directory succeeds.
  absl::Time expires = absl::InfiniteFuture();
};

absl::StatusOr<TlsFiles> LoadTlsDir(const std::string& dir);
// A trainer's directory: with a tls.key, LoadTlsDir's; else ca.crt alone
// (checked as LoadTlsDir checks it), cert_pem and key_pem empty: its
// channels present no certificate.
absl::StatusOr<TlsFiles> LoadTrainerTlsDir(const std::string& dir);

// How long before `expires` a daemon warns at start.
inline constexpr absl::Duration kTlsExpiryWarning = absl::Hours(24 * 30);
// "WARNING: <dir>'s certificates expire on <date> (in N days): issue new
// ones with ..." when tls.expires is within kTlsExpiryWarning of `now`;
// empty otherwise.
std::string TlsExpiryWarning(const TlsFiles& tls, absl::Time now);

// The gauge frameworm_tls_expiry_timestamp_seconds (tls.expires, Unix
// seconds) for a daemon's /metrics, so that an alert can fire before the
// day; nothing for a daemon without TLS (null).
void WriteTlsExpiryMetric(const TlsFiles* tls, PromWriter& w);

// Who tls.cert_pem says its holder is (role and name of its common name);
// INVALID_ARGUMENT when it is not a certificate of ours.
absl::StatusOr<Caller> IdentityOf(const TlsFiles& tls);

// Without cert_pem (a trainer's ca.crt alone) the client presents none.
std::shared_ptr<grpc::ChannelCredentials> ClientCredentials(const TlsFiles& tls);
// Every client certificate is verified against ca.crt; one is required
// unless `client_certificate_optional` (then a client may present none and
// is kAnonymous).
std::shared_ptr<grpc::ServerCredentials> ServerCredentials(const TlsFiles& tls,
                                                           bool client_certificate_optional = false);

// The authenticated caller of a server call: kLocal on a plaintext
// connection, kAnonymous on a TLS one without a client certificate, else
// the role and name of its verified certificate.
Caller CallerOf(const grpc::ServerContextBase& ctx);

}  // namespace frameworm

#endif  // FRAMEWORM_RPC_TLS_H_
