#include "rpc/tls.h"

#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include <openssl/pem.h>
#include <openssl/x509.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
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
  return t;
}

absl::StatusOr<Caller> IdentityOf(const TlsFiles& tls) {
  BIO* bio = BIO_new_mem_buf(tls.cert_pem.data(), static_cast<int>(tls.cert_pem.size()));
  X509* cert = bio != nullptr ? PEM_read_bio_X509(bio, nullptr, nullptr, nullptr) : nullptr;
  BIO_free(bio);
  char cn[256] = {};
  const int n = cert != nullptr
                    ? X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn,
                                                sizeof cn)
                    : -1;
  X509_free(cert);
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
  o.pem_private_key = tls.key_pem;
  o.pem_cert_chain = tls.cert_pem;
  return grpc::SslCredentials(o);
}

std::shared_ptr<grpc::ServerCredentials> ServerCredentials(const TlsFiles& tls) {
  grpc::SslServerCredentialsOptions o(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  o.pem_root_certs = tls.ca_pem;
  o.pem_key_cert_pairs.push_back({tls.key_pem, tls.cert_pem});
  return grpc::SslServerCredentials(o);
}

Caller CallerOf(const grpc::ServerContextBase& ctx) {
  std::shared_ptr<const grpc::AuthContext> auth = ctx.auth_context();
  if (auth == nullptr || !auth->IsPeerAuthenticated()) {
    // Plaintext: a TLS server never gets here (it requires and verifies a
    // client certificate before any call).
    const std::vector<grpc::string_ref> type = auth ? auth->FindPropertyValues(
                                                          GRPC_TRANSPORT_SECURITY_TYPE_PROPERTY_NAME)
                                                    : std::vector<grpc::string_ref>{};
    Caller c;
    if (type.empty() || std::string(type[0].data(), type[0].size()) != "ssl") {
      c.role = Caller::Role::kLocal;
    }
    return c;
  }
  const std::vector<grpc::string_ref> cn = auth->FindPropertyValues(GRPC_X509_CN_PROPERTY_NAME);
  if (cn.size() != 1) return Caller{};
  return Caller::FromCommonName(std::string(cn[0].data(), cn[0].size()));
}

}  // namespace frameworm
