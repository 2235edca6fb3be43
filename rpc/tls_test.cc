// The cluster CA (rpc/cluster_ca.h) and mutual TLS (rpc/tls.h) with real
// certificates and a real gRPC server on 127.0.0.1.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "frameworm/v1/trainer_service.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rpc/cluster_ca.h"
#include "rpc/rpc.h"
#include "rpc/tls.h"

namespace frameworm {
namespace {

std::string TempDir() {
  char tmpl[] = "/tmp/fw-tls-XXXXXX";
  return ::mkdtemp(tmpl) ? std::string(tmpl) : std::string();
}

int ModeOf(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? static_cast<int>(st.st_mode & 0777) : -1;
}

// Answers ReportStep with who called: checkpoint_at_step = the role,
// the name in the response is recorded.
class WhoAmI final : public v1::TrainerService::CallbackService {
 public:
  grpc::ServerUnaryReactor* ReportStep(grpc::CallbackServerContext* ctx, const v1::StepMetrics*,
                                       v1::ReportStepResponse* resp) override {
    const Caller c = CallerOf(*ctx);
    resp->set_checkpoint_at_step(static_cast<int>(c.role));
    {
      absl::MutexLock l(&mu_);
      last_ = c.name;
    }
    auto* r = ctx->DefaultReactor();
    r->Finish(grpc::Status::OK);
    return r;
  }
  std::string last() {
    absl::MutexLock l(&mu_);
    return last_;
  }

 private:
  absl::Mutex mu_;
  std::string last_;
};

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TempDir();
    ASSERT_FALSE(dir_.empty());
    ASSERT_TRUE(InitClusterCa(dir_ + "/ca").ok());
    ASSERT_TRUE(IssueCertificate(dir_ + "/ca", "coordinator", "main", dir_ + "/coord").ok());
    ASSERT_TRUE(IssueCertificate(dir_ + "/ca", "admin", "root", dir_ + "/admin").ok());
    ASSERT_TRUE(IssueCertificate(dir_ + "/ca", "worker", "node-1", dir_ + "/node-1").ok());
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }

  TlsFiles Load(const std::string& name) {
    absl::StatusOr<TlsFiles> t = LoadTlsDir(dir_ + "/" + name);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? *t : TlsFiles{};
  }
  // A server presenting `server_dir`'s certificate.
  void Serve(const std::string& server_dir, bool client_certificate_optional = false) {
    ServerOptions o;
    o.tls = Load(server_dir);
    o.client_certificate_optional = client_certificate_optional;
    auto s = StartServer(o, {&svc_});
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
  }
  // ReportStep with `tls` (nullptr: plaintext); the status and the role.
  grpc::Status Call(const TlsFiles* tls, int* role = nullptr) {
    auto stub = v1::TrainerService::NewStub(
        MakeChannel(absl::StrCat("127.0.0.1:", server_.port), tls));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::StepMetrics req;
    v1::ReportStepResponse resp;
    grpc::Status s = stub->ReportStep(&ctx, req, &resp);
    if (role != nullptr) *role = static_cast<int>(resp.checkpoint_at_step());
    return s;
  }

  std::string dir_;
  WhoAmI svc_;
  StartedServer server_;
};

TEST_F(TlsTest, CaFilesAreNewAndPrivate) {
  for (const char* f : {"/ca/ca.key", "/ca/ca.crt", "/admin/tls.key", "/admin/tls.crt",
                        "/admin/ca.crt"}) {
    EXPECT_EQ(ModeOf(dir_ + f), 0600) << f;
  }
  EXPECT_EQ(ModeOf(dir_ + "/ca"), 0700);
  EXPECT_EQ(ModeOf(dir_ + "/admin"), 0700);
  // Nothing is ever overwritten.
  EXPECT_EQ(InitClusterCa(dir_ + "/ca").code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(IssueCertificate(dir_ + "/ca", "user", "alice", dir_ + "/admin").code(),
            absl::StatusCode::kAlreadyExists);
  // Bad identities and a missing CA are named.
  EXPECT_EQ(IssueCertificate(dir_ + "/ca", "root", "x", dir_ + "/r").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(IssueCertificate(dir_ + "/ca", "user", "al ice", dir_ + "/r").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(IssueCertificate(dir_ + "/ca", "user", std::string(65, 'a'), dir_ + "/r").code(),
            absl::StatusCode::kInvalidArgument);
  absl::Status none = IssueCertificate(dir_ + "/nothing", "user", "alice", dir_ + "/r");
  EXPECT_EQ(none.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(none.message().find("admin ca init"), std::string::npos) << none;
  EXPECT_EQ(InitClusterCa(dir_ + "/ca2", 0).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(TlsTest, CertificatesNameTheirRoleAndChainToTheCa) {
  auto read_cert = [](const std::string& path) {
    FILE* f = std::fopen(path.c_str(), "r");
    X509* x = f ? PEM_read_X509(f, nullptr, nullptr, nullptr) : nullptr;
    if (f) std::fclose(f);
    return x;
  };
  X509* ca = read_cert(dir_ + "/ca/ca.crt");
  X509* worker = read_cert(dir_ + "/node-1/tls.crt");
  X509* coord = read_cert(dir_ + "/coord/tls.crt");
  ASSERT_TRUE(ca && worker && coord);
  char cn[128] = {};
  X509_NAME_get_text_by_NID(X509_get_subject_name(worker), NID_commonName, cn, sizeof cn);
  EXPECT_STREQ(cn, "worker:node-1");
  EVP_PKEY* ca_key = X509_get0_pubkey(ca);
  EXPECT_EQ(X509_verify(worker, ca_key), 1);
  EXPECT_EQ(X509_verify(coord, ca_key), 1);
  // Only the coordinator's certificate carries the name clients check.
  EXPECT_EQ(X509_check_host(coord, kCoordinatorTlsName, 0, 0, nullptr), 1);
  EXPECT_NE(X509_check_host(worker, kCoordinatorTlsName, 0, 0, nullptr), 1);
  X509_free(ca);
  X509_free(worker);
  X509_free(coord);
}

TEST_F(TlsTest, MutualTlsIdentifiesTheCallerAndRefusesStrangers) {
  Serve("coord");
  const TlsFiles admin = Load("admin");
  const TlsFiles worker = Load("node-1");
  int role = -1;
  ASSERT_TRUE(Call(&admin, &role).ok());
  EXPECT_EQ(role, static_cast<int>(Caller::Role::kAdmin));
  EXPECT_EQ(svc_.last(), "root");
  ASSERT_TRUE(Call(&worker, &role).ok());
  EXPECT_EQ(role, static_cast<int>(Caller::Role::kWorker));
  EXPECT_EQ(svc_.last(), "node-1");
  // A plaintext client gets no call through.
  EXPECT_FALSE(Call(nullptr).ok());
  // A certificate of another CA is refused.
  ASSERT_TRUE(InitClusterCa(dir_ + "/other-ca").ok());
  ASSERT_TRUE(IssueCertificate(dir_ + "/other-ca", "admin", "root", dir_ + "/stranger").ok());
  const TlsFiles stranger = Load("stranger");
  EXPECT_FALSE(Call(&stranger).ok());
  // A client with the CA but no certificate of its own is refused.
  TlsFiles anonymous = admin;
  anonymous.cert_pem.clear();
  anonymous.key_pem.clear();
  EXPECT_FALSE(Call(&anonymous).ok());
  server_.server->Shutdown();
}

// A trainer's directory holds ca.crt alone: its channel presents no
// certificate; a server that makes one optional takes it as kAnonymous and
// still verifies every certificate presented.
TEST_F(TlsTest, ATrainerWithTheCaAloneIsAnonymousWhereCertificatesAreOptional) {
  const std::string trainer = dir_ + "/trainer";
  ASSERT_EQ(std::system(("mkdir -p " + trainer + " && cp " + dir_ + "/ca/ca.crt " + trainer).c_str()),
            0);
  absl::StatusOr<TlsFiles> ca_only = LoadTrainerTlsDir(trainer);
  ASSERT_TRUE(ca_only.ok()) << ca_only.status();
  EXPECT_TRUE(ca_only->cert_pem.empty());
  EXPECT_TRUE(ca_only->key_pem.empty());
  EXPECT_LT(ca_only->expires, absl::InfiniteFuture());
  // A directory with a key is loaded whole, as LoadTlsDir does.
  absl::StatusOr<TlsFiles> whole = LoadTrainerTlsDir(dir_ + "/node-1");
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_FALSE(whole->key_pem.empty());
  // No ca.crt: named.
  absl::StatusOr<TlsFiles> none = LoadTrainerTlsDir(dir_ + "/no-such");
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find("ca.crt"), std::string::npos) << none.status();

  Serve("coord");  // certificates required: refused
  EXPECT_FALSE(Call(&*ca_only).ok());
  server_.server->Shutdown();
  Serve("coord", /*client_certificate_optional=*/true);
  int role = -1;
  ASSERT_TRUE(Call(&*ca_only, &role).ok());
  EXPECT_EQ(role, static_cast<int>(Caller::Role::kAnonymous));
  const TlsFiles worker = Load("node-1");
  ASSERT_TRUE(Call(&worker, &role).ok());
  EXPECT_EQ(role, static_cast<int>(Caller::Role::kWorker));
  EXPECT_FALSE(Call(nullptr).ok());  // plaintext still gets nothing through
  ASSERT_TRUE(InitClusterCa(dir_ + "/other-ca").ok());
  ASSERT_TRUE(IssueCertificate(dir_ + "/other-ca", "admin", "root", dir_ + "/stranger").ok());
  const TlsFiles stranger = Load("stranger");
  EXPECT_FALSE(Call(&stranger).ok());  // a certificate presented is verified
  server_.server->Shutdown();
}

TEST_F(TlsTest, AClusterCertificateThatIsNotTheCoordinatorsCannotServe) {
  // A man in the middle holding a worker's certificate and key.
  Serve("node-1");
  const TlsFiles admin = Load("admin");
  EXPECT_FALSE(Call(&admin).ok());
  server_.server->Shutdown();
}

TEST_F(TlsTest, TlsDirectoryProblemsAreNamed) {
  ASSERT_EQ(::chmod((dir_ + "/admin/tls.key").c_str(), 0644), 0);
  absl::StatusOr<TlsFiles> open_key = LoadTlsDir(dir_ + "/admin");
  EXPECT_EQ(open_key.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(open_key.status().message().find("chmod 600"), std::string::npos);
  absl::StatusOr<TlsFiles> missing = LoadTlsDir(dir_ + "/nowhere");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("ca.crt"), std::string::npos);
  std::ofstream(dir_ + "/node-1/tls.crt.txt") << "x";
  ASSERT_EQ(std::rename((dir_ + "/node-1/tls.crt.txt").c_str(),
                        (dir_ + "/node-1/tls.crt").c_str()), 0);
  EXPECT_EQ(LoadTlsDir(dir_ + "/node-1").status().code(), absl::StatusCode::kInvalidArgument);
  // A device in place of a certificate is refused after 1 MiB, not read
  // forever.
  ASSERT_EQ(std::remove((dir_ + "/node-1/tls.crt").c_str()), 0);
  ASSERT_EQ(::symlink("/dev/zero", (dir_ + "/node-1/tls.crt").c_str()), 0);
  absl::StatusOr<TlsFiles> device = LoadTlsDir(dir_ + "/node-1");
  EXPECT_EQ(device.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(device.status().message().find("tls.crt is not a PEM file"), std::string::npos)
      << device.status();
}

// A copy of node-1's directory whose tls.crt has the validity [from, until)
// (seconds from now), signed by the cluster CA with node-1's key.
std::string WithValidity(const std::string& dir, const std::string& name, long from, long until) {
  const std::string out = dir + "/" + name;
  std::filesystem::create_directories(out);
  for (const char* f : {"/ca.crt", "/tls.key"}) {
    std::filesystem::copy_file(dir + "/node-1" + f, out + f);
  }
  ::chmod((out + "/tls.key").c_str(), 0600);
  auto read_pem = [](const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string ca_pem = read_pem(dir + "/ca/ca.crt"), ca_key_pem = read_pem(dir + "/ca/ca.key"),
                    key_pem = read_pem(dir + "/node-1/tls.key");
  BIO* b = BIO_new_mem_buf(ca_pem.data(), static_cast<int>(ca_pem.size()));
  X509* ca = PEM_read_bio_X509(b, nullptr, nullptr, nullptr);
  BIO_free(b);
  b = BIO_new_mem_buf(ca_key_pem.data(), static_cast<int>(ca_key_pem.size()));
  EVP_PKEY* ca_key = PEM_read_bio_PrivateKey(b, nullptr, nullptr, nullptr);
  BIO_free(b);
  b = BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size()));
  EVP_PKEY* key = PEM_read_bio_PrivateKey(b, nullptr, nullptr, nullptr);
  BIO_free(b);
  X509* cert = X509_new();
  X509_set_version(cert, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert), 4242);
  X509_NAME_add_entry_by_txt(X509_get_subject_name(cert), "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("worker:node-1"), -1, -1, 0);
  X509_set_issuer_name(cert, X509_get_subject_name(ca));
  X509_gmtime_adj(X509_getm_notBefore(cert), from);
  X509_gmtime_adj(X509_getm_notAfter(cert), until);
  X509_set_pubkey(cert, key);
  X509_sign(cert, ca_key, EVP_sha256());
  FILE* f = std::fopen((out + "/tls.crt").c_str(), "w");
  PEM_write_X509(f, cert);
  std::fclose(f);
  X509_free(cert);
  X509_free(ca);
  EVP_PKEY_free(ca_key);
  EVP_PKEY_free(key);
  return out;
}

TEST_F(TlsTest, FilesAHandshakeWouldRefuseAreNamedAtLoad) {
  // A certificate made here the way the CA makes them loads.
  ASSERT_TRUE(LoadTlsDir(WithValidity(dir_, "fine", -60, 86400)).ok());
  absl::StatusOr<TlsFiles> t = LoadTlsDir(WithValidity(dir_, "expired", -10 * 86400, -86400));
  EXPECT_EQ(t.status().code(), absl::StatusCode::kFailedPrecondition) << t.status();
  EXPECT_THAT(std::string(t.status().message()),
              ::testing::MatchesRegex(".*/expired/tls.crt expired on 20[0-9-]+ [0-9:]+ UTC; issue "
                                      "a new one with `frameworm-cli admin ca issue`"));
  t = LoadTlsDir(WithValidity(dir_, "future", 86400, 10 * 86400));
  EXPECT_EQ(t.status().code(), absl::StatusCode::kFailedPrecondition) << t.status();
  EXPECT_NE(t.status().message().find("/future/tls.crt is not valid before "), std::string::npos)
      << t.status();
  EXPECT_NE(t.status().message().find("is this host's clock right?"), std::string::npos);
  // Another certificate's key.
  std::filesystem::copy(dir_ + "/node-1", dir_ + "/wrong-key");
  std::filesystem::copy_file(dir_ + "/admin/tls.key", dir_ + "/wrong-key/tls.key",
                             std::filesystem::copy_options::overwrite_existing);
  t = LoadTlsDir(dir_ + "/wrong-key");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << t.status();
  EXPECT_NE(t.status().message().find("/wrong-key/tls.key is not the private key of "),
            std::string::npos)
      << t.status();
  // Another cluster's CA beside this cluster's certificate.
  ASSERT_TRUE(InitClusterCa(dir_ + "/other-ca").ok());
  std::filesystem::copy(dir_ + "/node-1", dir_ + "/wrong-ca");
  std::filesystem::copy_file(dir_ + "/other-ca/ca.crt", dir_ + "/wrong-ca/ca.crt",
                             std::filesystem::copy_options::overwrite_existing);
  t = LoadTlsDir(dir_ + "/wrong-ca");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << t.status();
  EXPECT_NE(t.status().message().find("/wrong-ca/tls.crt was not issued by "), std::string::npos)
      << t.status();
}

// The earlier end of validity is known, warned of within 30 days, and
// exported for alerts.
TEST_F(TlsTest, ExpiryIsKnownWarnedOfAndExported) {
  absl::StatusOr<TlsFiles> soon = LoadTlsDir(WithValidity(dir_, "soon", -60, 10 * 86400));
  ASSERT_TRUE(soon.ok()) << soon.status();
  EXPECT_LE(absl::AbsDuration(soon->expires - (absl::Now() + absl::Hours(240))), absl::Minutes(1));
  const std::string warning = TlsExpiryWarning(*soon, absl::Now());
  EXPECT_NE(warning.find("WARNING: " + dir_ + "/soon's certificates expire on 20"), std::string::npos)
      << warning;
  EXPECT_NE(warning.find("(in 9 days): issue new ones with `frameworm-cli admin ca issue`"),
            std::string::npos)
      << warning;
  // As the CA issues them (a year and more): no warning.
  const TlsFiles issued = Load("node-1");
  EXPECT_GT(issued.expires, absl::Now() + kTlsExpiryWarning);
  EXPECT_EQ(TlsExpiryWarning(issued, absl::Now()), "");
  PromWriter w;
  WriteTlsExpiryMetric(&*soon, w);
  EXPECT_NE(w.text().find(absl::StrCat("\nframeworm_tls_expiry_timestamp_seconds ",
                                       absl::ToUnixSeconds(soon->expires), "\n")),
            std::string::npos)
      << w.text();
  PromWriter none;
  WriteTlsExpiryMetric(nullptr, none);
  EXPECT_EQ(none.text(), "");
}

}  // namespace
}  // namespace frameworm
