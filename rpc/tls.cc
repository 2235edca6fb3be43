#include "rpc/tls.h"

#include <sys/stat.h>

#include <algorithm>
#include <ctime>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "grpc/grpc_security_constants.h"

namespace frameworm {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(
        "cannot read ", path, " (a TLS directory holds ca.crt, tls.crt and tls.key; make one with "
        "`frameworm-cli admin ca issue`)"));
  }
  // At most 1 MiB and one byte: a PEM file is a few KiB, and a device
  // (/dev/zero) would otherwise be read forever.
  constexpr std::streamsize kMaxPem = 1 << 20;
  std::string pem(kMaxPem + 1, '\0');
  in.read(pem.data(), kMaxPem + 1);
  pem.resize(static_cast<size_t>(in.gcount()));
  if (pem.size() > static_cast<size_t>(kMaxPem) || !absl::StrContains(pem, "-----BEGIN ")) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a PEM file"));
  }
  return pem;
}

using CertPtr = std::unique_ptr<X509, decltype(&X509_free)>;
using KeyPtr = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;

CertPtr ParseCert(const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  CertPtr c(bio != nullptr ? PEM_read_bio_X509(bio, nullptr, nullptr, nullptr) : nullptr,
            X509_free);
  BIO_free(bio);
  return c;
}

// The time an ASN1_TIME holds; nullopt when unreadable.
std::optional<absl::Time> TimeOf(const ASN1_TIME* t) {
  struct tm tm = {};
  if (t == nullptr || ASN1_TIME_to_tm(t, &tm) != 1) return std::nullopt;
  return absl::FromTimeT(::timegm(&tm));
}

// "2026-12-06 08:00 UTC".
std::string Shown(const ASN1_TIME* t) {
  const std::optional<absl::Time> when = TimeOf(t);
  if (!when) return "an unreadable date";
  return absl::FormatTime("%Y-%m-%d %H:%M UTC", *when, absl::UTCTimeZone());
}

// The certificate's notAfter (InfiniteFuture when unreadable).
absl::Time EndOf(X509* cert) {
  return TimeOf(X509_get0_notAfter(cert)).value_or(absl::InfiniteFuture());
}

// Within its validity now: a handshake with it would fail, naming nothing.
absl::Status CheckValidNow(X509* cert, const std::string& path) {
  const ASN1_TIME* from = X509_get0_notBefore(cert);
  const ASN1_TIME* until = X509_get0_notAfter(cert);
  if (X509_cmp_current_time(from) > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, " is not valid before ", Shown(from), " (is this host's clock right?)"));
  }
  if (X509_cmp_current_time(until) < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " expired on ", Shown(until),
                     "; issue a new one with `frameworm-cli admin ca issue`"));
  }
  return absl::OkStatus();
}

// What a TLS handshake would refuse later with an error naming no file: a
// certificate out of its validity, a key that is not the certificate's, a
// certificate the directory's CA did not issue.
absl::Status CheckTlsFiles(TlsFiles& t) {
  const std::string ca_path = t.dir + "/ca.crt", cert_path = t.dir + "/tls.crt";
  CertPtr ca = ParseCert(t.ca_pem), cert = ParseCert(t.cert_pem);
  ERR_clear_error();
  if (!ca) return absl::InvalidArgumentError(absl::StrCat(ca_path, " is not a PEM certificate"));
  if (!cert) {
    return absl::InvalidArgumentError(absl::StrCat(cert_path, " is not a PEM certificate"));
  }
  if (absl::Status s = CheckValidNow(ca.get(), ca_path); !s.ok()) return s;
  if (absl::Status s = CheckValidNow(cert.get(), cert_path); !s.ok()) return s;
  t.expires = std::min(EndOf(ca.get()), EndOf(cert.get()));
  BIO* bio = BIO_new_mem_buf(t.key_pem.data(), static_cast<int>(t.key_pem.size()));
  KeyPtr key(bio != nullptr ? PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr) : nullptr,
             EVP_PKEY_free);
  BIO_free(bio);
  const bool key_matches = key && X509_check_private_key(cert.get(), key.get()) == 1;
  const bool issued = X509_verify(cert.get(), X509_get0_pubkey(ca.get())) == 1;
  ERR_clear_error();
  if (!key) {
    return absl::InvalidArgumentError(absl::StrCat(t.dir, "/tls.key is not a PEM private key"));
  }
  if (!key_matches) {
    return absl::InvalidArgumentError(
        absl::StrCat(t.dir, "/tls.key is not the private key of ", cert_path));
  }
  if (!issued) {
    return absl::InvalidArgumentError(absl::StrCat(
        cert_path, " was not issued by ", ca_path,
        " (each directory holds the cluster CA's certificate and one it issued)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TlsFiles> LoadTlsDir(const std::string& dir) {
  TlsFiles t;
  t.dir = dir;
  const std::string key = dir + "/tls.key";
  struct stat st;
  if (::stat(key.c_str(), &st) == 0 && (st.st_mode & 077) != 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        key, " is readable by others (mode ", absl::StrCat(st.st_mode & 0777), " decimal); "
        "chmod 600 it"));
  }
  for (auto [field, name] : {std::pair{&t.ca_pem, "/ca.crt"}, std::pair{&t.cert_pem, "/tls.crt"},
                             std::pair{&t.key_pem, "/tls.key"}}) {
    absl::StatusOr<std::string> pem = ReadPem(dir + name);
    if (!pem.ok()) return pem.status();
    *field = *std::move(pem);
  }
  if (absl::Status s = CheckTlsFiles(t); !s.ok()) return s;
  return t;
}

absl::StatusOr<TlsFiles> LoadTrainerTlsDir(const std::string& dir) {
  struct stat st;
  if (::lstat((dir + "/tls.key").c_str(), &st) == 0) return LoadTlsDir(dir);
  TlsFiles t;
  t.dir = dir;
  const std::string ca_path = dir + "/ca.crt";
  absl::StatusOr<std::string> pem = ReadPem(ca_path);
  if (absl::IsNotFound(pem.status())) {
    return absl::NotFoundError(absl::StrCat(
        "cannot read ", ca_path, " (a trainer's TLS directory holds the cluster CA's ca.crt, "
        "which its worker writes into <work-dir>/trainer-tls)"));
  }
  if (!pem.ok()) return pem.status();
  t.ca_pem = *std::move(pem);
  CertPtr ca = ParseCert(t.ca_pem);
  ERR_clear_error();
  if (!ca) return absl::InvalidArgumentError(absl::StrCat(ca_path, " is not a PEM certificate"));
  if (absl::Status s = CheckValidNow(ca.get(), ca_path); !s.ok()) return s;
  t.expires = EndOf(ca.get());
  return t;
}

std::string TlsExpiryWarning(const TlsFiles& tls, absl::Time now) {
  if (tls.expires - now > kTlsExpiryWarning) return "";
  return absl::StrCat("WARNING: ", tls.dir, "'s certificates expire on ",
                      absl::FormatTime("%Y-%m-%d %H:%M UTC", tls.expires, absl::UTCTimeZone()),
                      " (in ", absl::ToInt64Hours(tls.expires - now) / 24,
                      " days): issue new ones with `frameworm-cli admin ca issue` and restart");
}

void WriteTlsExpiryMetric(const TlsFiles* tls, PromWriter& w) {
  if (tls == nullptr || tls->expires == absl::InfiniteFuture()) return;
  w.Family("frameworm_tls_expiry_timestamp_seconds", "gauge",
           "When this daemon's TLS certificates (the earlier of ca.crt and tls.crt) expire, "
           "in Unix seconds.");
  w.Sample("frameworm_tls_expiry_timestamp_seconds", {},
           static_cast<double>(absl::ToUnixSeconds(tls->expires)));
}

absl::StatusOr<Caller> IdentityOf(const TlsFiles& tls) {
  const CertPtr cert = ParseCert(tls.cert_pem);
  char cn[256] = {};
  const int n = cert ? X509_NAME_get_text_by_NID(X509_get_subject_name(cert.get()),
                                                 NID_commonName, cn, sizeof cn)
                     : -1;
  const Caller c = n > 0 ? Caller::FromCommonName(cn) : Caller{};
  if (c.role == Caller::Role::kNone) {
    return absl::InvalidArgumentError(absl::StrCat(
        tls.dir, "/tls.crt is not a Frameworm certificate (its common name must be "
        "<role>:<name>; issue one with `frameworm-cli admin ca issue`)"));
  }
  return c;
}

std::shared_ptr<grpc::ChannelCredentials> ClientCredentials(const TlsFiles& tls) {
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = tls.ca_pem;
  if (!tls.cert_pem.empty()) {  // else no client certificate (a trainer)
    o.pem_private_key = tls.key_pem;
    o.pem_cert_chain = tls.cert_pem;
  }
  return grpc::SslCredentials(o);
}

std::shared_ptr<grpc::ServerCredentials> ServerCredentials(const TlsFiles& tls,
                                                           bool client_certificate_optional) {
  grpc::SslServerCredentialsOptions o(
      client_certificate_optional ? GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY
                                  : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  o.pem_root_certs = tls.ca_pem;
  o.pem_key_cert_pairs.push_back({tls.key_pem, tls.cert_pem});
  return grpc::SslServerCredentials(o);
}

Caller CallerOf(const grpc::ServerContextBase& ctx) {
  std::shared_ptr<const grpc::AuthContext> auth = ctx.auth_context();
  if (auth == nullptr || !auth->IsPeerAuthenticated()) {
    // Plaintext, or TLS without a client certificate (only where the
    // server made one optional: a certificate presented is verified in the
    // handshake, before any call).
    const std::vector<grpc::string_ref> type = auth ? auth->FindPropertyValues(
                                                          GRPC_TRANSPORT_SECURITY_TYPE_PROPERTY_NAME)
                                                    : std::vector<grpc::string_ref>{};
    Caller c;
    c.role = type.empty() || std::string(type[0].data(), type[0].size()) != "ssl"
                 ? Caller::Role::kLocal
                 : Caller::Role::kAnonymous;
    return c;
  }
  const std::vector<grpc::string_ref> cn = auth->FindPropertyValues(GRPC_X509_CN_PROPERTY_NAME);
  if (cn.size() != 1) return Caller{};
  return Caller::FromCommonName(std::string(cn[0].data(), cn[0].size()));
}

}  // namespace frameworm
