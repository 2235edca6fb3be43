// The cluster CA (rpc/cluster_ca.h) and mutual TLS (rpc/tls.h) with real
// certificates and a real gRPC server on 127.0.0.1.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "frameworm/v1/trainer_service.grpc.pb.h"
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
  void Serve(const std::string& server_dir) {
    ServerOptions o;
    o.tls = Load(server_dir);
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

}  // namespace
}  // namespace frameworm
