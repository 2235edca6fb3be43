#include "rpc/cluster_ca.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "absl/strings/str_cat.h"
#include "common/printable.h"
#include "rpc/tls.h"

namespace frameworm {
namespace {

template <typename T, void (*F)(T*)>
struct Deleter {
  void operator()(T* p) const { F(p); }
};
using KeyPtr = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>>;
using CertPtr = std::unique_ptr<X509, Deleter<X509, X509_free>>;
using BioPtr = std::unique_ptr<BIO, Deleter<BIO, BIO_free_all>>;

absl::Status OpenSslError(const std::string& what) {
  char buf[256] = "unknown error";
  const unsigned long e = ERR_get_error();
  if (e != 0) ERR_error_string_n(e, buf, sizeof buf);
  ERR_clear_error();
  return absl::InternalError(absl::StrCat(what, ": ", buf));
}

absl::Status Errno(const std::string& what) {
  return absl::Status(absl::ErrnoToStatusCode(errno), absl::StrCat(what, ": ", std::strerror(errno)));
}

// `dir` and any missing parents; `dir` itself made 0700 when created here.
absl::Status MakeDir(const std::string& dir) {
  std::error_code ec;
  const std::filesystem::path parent = std::filesystem::path(dir).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (ec) return absl::InternalError(absl::StrCat("creating ", parent.string(), ": ", ec.message()));
  if (::mkdir(dir.c_str(), 0700) == 0) {
    if (::chmod(dir.c_str(), 0700) != 0) return Errno("chmod " + dir);
  } else if (errno != EEXIST) {
    return Errno("creating " + dir);
  }
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0) return Errno(dir);
  if (!S_ISDIR(st.st_mode)) return absl::FailedPreconditionError(dir + " is not a directory");
  return absl::OkStatus();
}

// Writes a new file (0600); never replaces one, never follows a symlink.
absl::Status WriteNew(const std::string& path, const std::string& data) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    if (errno == EEXIST) return absl::AlreadyExistsError(path + " exists; not overwritten");
    return Errno("creating " + path);
  }
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      absl::Status s = Errno("writing " + path);
      ::close(fd);
      return s;
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) return Errno("writing " + path);
  return absl::OkStatus();
}

absl::StatusOr<std::string> Pem(EVP_PKEY* key, X509* cert) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio) return OpenSslError("BIO_new");
  const int ok = key != nullptr
                     ? PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr)
                     : PEM_write_bio_X509(bio.get(), cert);
  if (ok != 1) return OpenSslError("PEM encoding");
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

absl::StatusOr<KeyPtr> NewKey() {
  KeyPtr key(EVP_EC_gen("P-256"));
  if (!key) return OpenSslError("generating a P-256 key");
  return key;
}

absl::Status AddExtension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (ext == nullptr) return OpenSslError(absl::StrCat("extension ", OBJ_nid2sn(nid)));
  const int ok = X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  return ok == 1 ? absl::OkStatus() : OpenSslError("X509_add_ext");
}

// A certificate for `subject_cn` and `key`, signed by `issuer_key` as
// `issuer` (nullptr: self-signed).
absl::StatusOr<CertPtr> NewCertificate(const std::string& subject_cn, EVP_PKEY* key, X509* issuer,
                                       EVP_PKEY* issuer_key, int days,
                                       const std::vector<std::pair<int, std::string>>& exts) {
  CertPtr cert(X509_new());
  if (!cert) return OpenSslError("X509_new");
  X509_set_version(cert.get(), 2);
  BIGNUM* serial = BN_new();
  ASN1_INTEGER* asn = nullptr;
  if (serial != nullptr && BN_rand(serial, 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) == 1) {
    asn = BN_to_ASN1_INTEGER(serial, X509_get_serialNumber(cert.get()));
  }
  BN_free(serial);
  if (asn == nullptr) return OpenSslError("serial number");
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -60);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), static_cast<long>(days) * 86400);
  X509_NAME* name = X509_get_subject_name(cert.get());
  if (X509_NAME_add_entry_by_txt(name, "O", MBSTRING_UTF8,
                                 reinterpret_cast<const unsigned char*>("frameworm"), -1, -1,
                                 0) != 1 ||
      X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                                 reinterpret_cast<const unsigned char*>(subject_cn.c_str()), -1,
                                 -1, 0) != 1) {
    return OpenSslError("subject name");
  }
  X509* signer = issuer != nullptr ? issuer : cert.get();
  if (X509_set_issuer_name(cert.get(), X509_get_subject_name(signer)) != 1 ||
      X509_set_pubkey(cert.get(), key) != 1) {
    return OpenSslError("issuer or public key");
  }
  for (const auto& [nid, value] : exts) {
    if (absl::Status s = AddExtension(cert.get(), signer, nid, value.c_str()); !s.ok()) return s;
  }
  if (X509_sign(cert.get(), issuer_key, EVP_sha256()) == 0) return OpenSslError("signing");
  return cert;
}

absl::StatusOr<std::string> ReadSmallFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

absl::Status CheckDays(int days) {
  if (days < 1 || days > 36500) {
    return absl::InvalidArgumentError(absl::StrCat("validity must be 1 to 36500 days, got ", days));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckCertificateIdentity(const std::string& role, const std::string& name) {
  if (role != "coordinator" && role != "worker" && role != "user" && role != "admin") {
    return absl::InvalidArgumentError(absl::StrCat(
        "role must be coordinator, worker, user or admin, got '", PrintableLine(role, 64), "'"));
  }
  bool ok = !name.empty() && name.size() <= 64;
  for (char ch : name) {
    ok = ok && ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                ch == '.' || ch == '_' || ch == '-');
  }
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        "name must be 1 to 64 characters of A-Z a-z 0-9 . _ -, got '", PrintableLine(name, 64), "'"));
  }
  return absl::OkStatus();
}

absl::Status InitClusterCa(const std::string& dir, int days) {
  if (absl::Status s = CheckDays(days); !s.ok()) return s;
  if (absl::Status s = MakeDir(dir); !s.ok()) return s;
  for (const char* f : {"/ca.crt", "/ca.key"}) {
    if (::access((dir + f).c_str(), F_OK) == 0) {
      return absl::AlreadyExistsError(dir + f + " exists; a cluster CA is already there");
    }
  }
  absl::StatusOr<KeyPtr> key = NewKey();
  if (!key.ok()) return key.status();
  absl::StatusOr<CertPtr> cert =
      NewCertificate("frameworm cluster CA", key->get(), nullptr, key->get(), days,
                     {{NID_basic_constraints, "critical,CA:TRUE,pathlen:0"},
                      {NID_key_usage, "critical,keyCertSign,cRLSign"},
                      {NID_subject_key_identifier, "hash"}});
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key_pem = Pem(key->get(), nullptr);
  absl::StatusOr<std::string> cert_pem = Pem(nullptr, cert->get());
  if (!key_pem.ok()) return key_pem.status();
  if (!cert_pem.ok()) return cert_pem.status();
  if (absl::Status s = WriteNew(dir + "/ca.key", *key_pem); !s.ok()) return s;
  return WriteNew(dir + "/ca.crt", *cert_pem);
}

absl::Status IssueCertificate(const std::string& ca_dir, const std::string& role,
                              const std::string& name, const std::string& out_dir, int days) {
  if (absl::Status s = CheckCertificateIdentity(role, name); !s.ok()) return s;
  if (absl::Status s = CheckDays(days); !s.ok()) return s;
  absl::StatusOr<std::string> ca_pem = ReadSmallFile(ca_dir + "/ca.crt");
  absl::StatusOr<std::string> ca_key_pem = ReadSmallFile(ca_dir + "/ca.key");
  if (!ca_pem.ok() || !ca_key_pem.ok()) {
    return absl::NotFoundError(absl::StrCat(
        "no cluster CA in ", ca_dir, " (ca.crt and ca.key; create one with "
        "`frameworm-cli admin ca init --ca-dir ", ca_dir, "`)"));
  }
  BioPtr cb(BIO_new_mem_buf(ca_pem->data(), static_cast<int>(ca_pem->size())));
  BioPtr kb(BIO_new_mem_buf(ca_key_pem->data(), static_cast<int>(ca_key_pem->size())));
  CertPtr ca(cb ? PEM_read_bio_X509(cb.get(), nullptr, nullptr, nullptr) : nullptr);
  KeyPtr ca_key(kb ? PEM_read_bio_PrivateKey(kb.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!ca || !ca_key) return OpenSslError("reading the CA in " + ca_dir);
  if (X509_check_private_key(ca.get(), ca_key.get()) != 1) {
    return OpenSslError(ca_dir + "/ca.key does not belong to ca.crt");
  }
  std::vector<std::pair<int, std::string>> exts = {
      {NID_basic_constraints, "critical,CA:FALSE"},
      {NID_key_usage, "critical,digitalSignature"},
      {NID_subject_key_identifier, "hash"},
      {NID_authority_key_identifier, "keyid"}};
  if (role == "coordinator") {
    exts.push_back({NID_ext_key_usage, "serverAuth"});
    exts.push_back({NID_subject_alt_name, absl::StrCat("DNS:", kCoordinatorTlsName)});
  } else if (role == "worker") {
    exts.push_back({NID_ext_key_usage, "clientAuth,serverAuth"});
    exts.push_back({NID_subject_alt_name, absl::StrCat("DNS:", kWorkerTlsName)});
  } else {
    exts.push_back({NID_ext_key_usage, "clientAuth"});
  }
  absl::StatusOr<KeyPtr> key = NewKey();
  if (!key.ok()) return key.status();
  absl::StatusOr<CertPtr> cert = NewCertificate(absl::StrCat(role, ":", name), key->get(),
                                                ca.get(), ca_key.get(), days, exts);
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key_pem = Pem(key->get(), nullptr);
  absl::StatusOr<std::string> cert_pem = Pem(nullptr, cert->get());
  if (!key_pem.ok()) return key_pem.status();
  if (!cert_pem.ok()) return cert_pem.status();
  if (absl::Status s = MakeDir(out_dir); !s.ok()) return s;
  for (const char* f : {"/ca.crt", "/tls.crt", "/tls.key"}) {
    if (::access((out_dir + f).c_str(), F_OK) == 0) {
      return absl::AlreadyExistsError(out_dir + f + " exists; not overwritten");
    }
  }
  if (absl::Status s = WriteNew(out_dir + "/tls.key", *key_pem); !s.ok()) return s;
  if (absl::Status s = WriteNew(out_dir + "/tls.crt", *cert_pem); !s.ok()) return s;
  return WriteNew(out_dir + "/ca.crt", *ca_pem);
}

}  // namespace frameworm
