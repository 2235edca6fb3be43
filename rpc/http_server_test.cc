// The HTTP server on 127.0.0.1: what it serves, and every request it turns
// away.
#include "rpc/http_server.h"

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <signal.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rpc/cluster_ca.h"

namespace frameworm {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override { Start({}); }
  void Start(HttpServer::Options o) {
    server_.reset();
    auto s = HttpServer::Start(o, [](const HttpRequest& r) {
      if (r.path == "/metrics") return HttpResponse{200, "text/plain; version=0.0.4", "up 1\n"};
      if (r.path == "/who") {
        return HttpResponse{200, "text/plain", r.caller.Describe() + " " + r.query};
      }
      return HttpResponse{404, "text/plain", "no " + r.path + "\n"};
    });
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
    address_ = absl::StrCat("127.0.0.1:", server_->port());
  }
  // A cluster CA under TempDir()/<name>-<pid> with certificates "main"
  // (the coordinator's, which the server is restarted with, over HTTPS) and
  // "alice" (a user's); returns that directory.
  std::string StartHttpsForAlice(const std::string& name) {
    const std::string dir = ::testing::TempDir() + "/" + name + "-" + std::to_string(::getpid());
    std::filesystem::remove_all(dir);
    EXPECT_TRUE(InitClusterCa(dir + "/ca").ok());
    EXPECT_TRUE(IssueCertificate(dir + "/ca", "coordinator", "main", dir + "/main").ok());
    EXPECT_TRUE(IssueCertificate(dir + "/ca", "user", "alice", dir + "/alice").ok());
    HttpServer::Options o;
    o.tls = *LoadTlsDir(dir + "/main");
    Start(o);
    return dir;
  }
  std::string Raw(const std::string& request) {
    auto r = HttpExchange(address_, request);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : "";
  }
  std::unique_ptr<HttpServer> server_;
  std::string address_;
};

TEST_F(HttpServerTest, ServesAGetAndItsHead) {
  auto r = HttpGet(address_, "/metrics?x=1");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "up 1\n");
  const std::string head = Raw("HEAD /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n");
  EXPECT_THAT(head, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(head, HasSubstr("Content-Length: 5\r\n"));
  EXPECT_THAT(head, HasSubstr("Content-Type: text/plain; version=0.0.4\r\n"));
  EXPECT_EQ(head.substr(head.size() - 4), "\r\n\r\n");  // no body
  auto missing = HttpGet(address_, "/nothing");
  ASSERT_TRUE(missing.ok());
  EXPECT_EQ(missing->status, 404);
}

// Plaintext on loopback: a request for another host name is what a web
// page that rebinds its name to 127.0.0.1 would send; it is refused, and
// loopback names, with or without a port, and requests without a Host
// header (HTTP/1.0 tools) are served.
TEST_F(HttpServerTest, APlaintextLoopbackServerAnswersOnlyLoopbackHostNames) {
  for (const std::string& host : std::vector<std::string>{
           "localhost", "LOCALHOST:7080", "127.0.0.1", address_, "127.1.2.3:80", "[::1]:7080"}) {
    EXPECT_THAT(Raw("GET /metrics HTTP/1.1\r\nhost: " + host + "\r\n\r\n"),
                StartsWith("HTTP/1.1 200 OK\r\n"))
        << host;
  }
  EXPECT_THAT(Raw("GET /metrics HTTP/1.0\r\n\r\n"), StartsWith("HTTP/1.1 200 OK\r\n"));
  for (const std::string host : {"attacker.example", "attacker.example:7080",
                                 "127.0.0.1.attacker.example", "10.0.0.1", ""}) {
    const std::string r = Raw("GET /metrics HTTP/1.1\r\nHost: " + host + "\r\n\r\n");
    EXPECT_THAT(r, StartsWith("HTTP/1.1 403 ")) << host;
    EXPECT_THAT(r, HasSubstr("is not a loopback name")) << host;
    EXPECT_THAT(r, ::testing::Not(HasSubstr("up 1"))) << host;
  }
}

TEST_F(HttpServerTest, APlaintextCallerIsLocal) {
  auto r = HttpGet(address_, "/who?a=1");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->body, Caller{Caller::Role::kLocal}.Describe() + " a=1");
}

// HTTPS with the cluster's certificates: the caller is the client
// certificate's; no certificate, or one of another CA, gets nothing.
TEST_F(HttpServerTest, TlsNeedsAClusterCertificateAndNamesItsHolder) {
  const std::string dir = ::testing::TempDir() + "/http-tls-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(InitClusterCa(dir + "/ca").ok());
  ASSERT_TRUE(IssueCertificate(dir + "/ca", "coordinator", "main", dir + "/main").ok());
  ASSERT_TRUE(IssueCertificate(dir + "/ca", "user", "alice", dir + "/alice").ok());
  ASSERT_TRUE(InitClusterCa(dir + "/other").ok());
  ASSERT_TRUE(IssueCertificate(dir + "/other", "admin", "root", dir + "/stranger").ok());
  HttpServer::Options o;
  o.tls = *LoadTlsDir(dir + "/main");
  Start(o);
  const TlsFiles alice = *LoadTlsDir(dir + "/alice");
  auto r = HttpGet(address_, "/who", absl::Seconds(10), &alice);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200);
  EXPECT_THAT(r->body, HasSubstr("alice"));
  EXPECT_THAT(r->body, HasSubstr("user"));
  EXPECT_FALSE(HttpGet(address_, "/who", absl::Seconds(5)).ok());  // plaintext to HTTPS
  const TlsFiles stranger = *LoadTlsDir(dir + "/stranger");
  EXPECT_FALSE(HttpGet(address_, "/who", absl::Seconds(5), &stranger).ok());
  std::filesystem::remove_all(dir);
}

// A TLS client of the dashboard as a browser is one: it offers the session
// of its previous connection. Sessions of `ctx` (alice's certificate) are
// kept in *session between calls.
class TlsClient {
 public:
  explicit TlsClient(const TlsFiles& who, int max_version = 0)
      : ctx_(SSL_CTX_new(TLS_client_method())) {
    if (max_version != 0) SSL_CTX_set_max_proto_version(ctx_, max_version);
    SSL_CTX_set_session_cache_mode(ctx_, SSL_SESS_CACHE_CLIENT);
    BIO* b = BIO_new_mem_buf(who.cert_pem.data(), static_cast<int>(who.cert_pem.size()));
    X509* cert = PEM_read_bio_X509(b, nullptr, nullptr, nullptr);
    BIO_free(b);
    SSL_CTX_use_certificate(ctx_, cert);
    X509_free(cert);
    b = BIO_new_mem_buf(who.key_pem.data(), static_cast<int>(who.key_pem.size()));
    EVP_PKEY* key = PEM_read_bio_PrivateKey(b, nullptr, nullptr, nullptr);
    BIO_free(b);
    SSL_CTX_use_PrivateKey(ctx_, key);
    EVP_PKEY_free(key);
  }
  ~TlsClient() {
    if (session_ != nullptr) SSL_SESSION_free(session_);
    SSL_CTX_free(ctx_);
  }
  // A TCP connection to 127.0.0.1:port with a finished TLS handshake
  // (offering the last session), or nullptr.
  SSL* Connect(int port, int* fd) {
    *fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    timeval tv{10, 0};
    ::setsockopt(*fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (::connect(*fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return nullptr;
    SSL* ssl = SSL_new(ctx_);
    SSL_set_fd(ssl, *fd);
    if (session_ != nullptr) SSL_set_session(ssl, session_);
    if (SSL_connect(ssl) != 1) {
      SSL_free(ssl);
      return nullptr;
    }
    return ssl;
  }
  // GET /who over a new connection: the response, or "" when the
  // handshake failed. Keeps the connection's session for the next call.
  std::string Get(int port) {
    int fd = -1;
    SSL* ssl = Connect(port, &fd);
    std::string out;
    if (ssl != nullptr) {
      const std::string req = "GET /who HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
      SSL_write(ssl, req.data(), static_cast<int>(req.size()));
      char buf[4096];
      for (int n; (n = SSL_read(ssl, buf, sizeof(buf))) > 0;) out.append(buf, static_cast<size_t>(n));
      reused_ = SSL_session_reused(ssl) == 1;
      if (session_ != nullptr) SSL_SESSION_free(session_);
      session_ = SSL_get1_session(ssl);
      SSL_free(ssl);
    }
    ERR_clear_error();
    ::close(fd);
    return out;
  }
  // Whether the last Get's handshake resumed the session it offered.
  bool reused() const { return reused_; }

 private:
  SSL_CTX* const ctx_;
  SSL_SESSION* session_ = nullptr;
  bool reused_ = false;
};

// A browser's second request offers the first one's session: it is served,
// as the first, with a full handshake (its certificate checked again), over
// TLS 1.2 and 1.3.
TEST_F(HttpServerTest, AClientOfferingItsLastSessionIsServed) {
  const std::string dir = StartHttpsForAlice("http-resume");
  for (int version : {TLS1_2_VERSION, TLS1_3_VERSION}) {
    TlsClient alice(*LoadTlsDir(dir + "/alice"), version);
    for (int i = 0; i < 3; ++i) {
      EXPECT_THAT(alice.Get(server_->port()), StartsWith("HTTP/1.1 200"))
          << "TLS version " << std::hex << version << ", request " << i;
      EXPECT_FALSE(alice.reused()) << "a resumed session skips the certificate check";
    }
  }
  std::filesystem::remove_all(dir);
}

// A client that finishes its handshake and then resets the connection
// (SO_LINGER 0) leaves the server, and the process it runs in (SIGPIPE left
// at its default here), serving the next one.
TEST_F(HttpServerTest, AClientThatResetsAfterItsHandshakeLeavesTheServerUp) {
  const std::string dir = StartHttpsForAlice("http-reset");
  ASSERT_EQ(::signal(SIGPIPE, SIG_DFL), SIG_DFL) << "the test needs SIGPIPE's default";
  const TlsFiles alice_files = *LoadTlsDir(dir + "/alice");
  TlsClient alice(alice_files);
  for (int i = 0; i < 5; ++i) {
    int fd = -1;
    SSL* ssl = alice.Connect(server_->port(), &fd);
    ASSERT_NE(ssl, nullptr);
    absl::SleepFor(absl::Milliseconds(50));  // the server waits in its read
    linger l{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    SSL_free(ssl);
    ::close(fd);  // RST
    absl::SleepFor(absl::Milliseconds(50));
  }
  auto r = HttpGet(address_, "/who", absl::Seconds(10), &alice_files);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200);
  std::filesystem::remove_all(dir);
}

TEST_F(HttpServerTest, MalformedOversizedAndOtherMethodsAreRefused) {
  EXPECT_THAT(Raw("POST /metrics HTTP/1.1\r\n\r\n"), StartsWith("HTTP/1.1 405 "));
  EXPECT_THAT(Raw("GET metrics HTTP/1.1\r\n\r\n"), StartsWith("HTTP/1.1 400 "));
  EXPECT_THAT(Raw("garbage\r\n\r\n"), StartsWith("HTTP/1.1 400 "));
  EXPECT_THAT(Raw("GET /metrics SMTP\r\n\r\n"), StartsWith("HTTP/1.1 400 "));
  EXPECT_THAT(Raw("GET /metrics HTTP/1.1\r\nX: " + std::string(20000, 'a') + "\r\n\r\n"),
              StartsWith("HTTP/1.1 431 "));
  // The server still answers.
  auto r = HttpGet(address_, "/metrics");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 200);
}

TEST_F(HttpServerTest, SilentClientsAreDroppedAndExtraConnectionsGet503) {
  HttpServer::Options o;
  o.max_connections = 2;
  o.io_timeout = absl::Milliseconds(400);
  Start(o);
  std::vector<int> idle;
  for (int i = 0; i < 2; ++i) {  // connected, never sending a byte
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(server_->port()));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    idle.push_back(fd);
  }
  absl::SleepFor(absl::Milliseconds(100));
  auto busy = HttpGet(address_, "/metrics");
  ASSERT_TRUE(busy.ok()) << busy.status();
  EXPECT_EQ(busy->status, 503);
  // The idle ones time out and are closed; then the server serves again.
  for (int fd : idle) {
    char b;
    EXPECT_EQ(::recv(fd, &b, 1, 0), 0) << "the silent connection was not closed";
    ::close(fd);
  }
  absl::SleepFor(absl::Milliseconds(50));
  auto again = HttpGet(address_, "/metrics");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->status, 200);
}

// A connection to 127.0.0.1:port.
int Connect(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  return fd;
}

// A GET of /metrics from source address `from` (a loopback address) to
// 127.0.0.1:port; the response's status line, or "" when the server
// closed without one.
std::string GetFrom(const char* from, int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in src{};
  src.sin_family = AF_INET;
  ::inet_pton(AF_INET, from, &src.sin_addr);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof(src)), 0) << from;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  const std::string req = "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n";
  ::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  std::string got;
  char buf[512];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof(buf), 0)) > 0;) got.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return got.substr(0, got.find("\r\n"));
}

// One peer address holds at most max_connections_per_peer connections: a
// client that opens connections and sends nothing (as one without a
// certificate could, before any TLS handshake) takes its share, not every
// slot; another address is still served.
TEST_F(HttpServerTest, OnePeerCannotTakeEverySlot) {
  HttpServer::Options o;
  o.max_connections = 8;
  o.max_connections_per_peer = 3;
  o.io_timeout = absl::Seconds(3);
  Start(o);
  std::vector<int> idle;
  for (int i = 0; i < 3; ++i) idle.push_back(Connect(server_->port()));  // from 127.0.0.1
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(GetFrom("127.0.0.1", server_->port()), "HTTP/1.1 503 Service Unavailable");
  EXPECT_EQ(GetFrom("127.0.0.2", server_->port()), "HTTP/1.1 200 OK");
  ::close(idle.back());  // its place is given back once the server sees it end
  idle.pop_back();
  std::string again;
  for (int i = 0; i < 50 && again != "HTTP/1.1 200 OK"; ++i) {
    absl::SleepFor(absl::Milliseconds(20));
    again = GetFrom("127.0.0.1", server_->port());
  }
  EXPECT_EQ(again, "HTTP/1.1 200 OK");
  for (int fd : idle) ::close(fd);
}

// Sends `bytes` one at a time, 100 ms apart, until the server closes the
// connection (or all are sent); returns how long the server kept it.
absl::Duration TrickleUntilClosed(int fd, const std::string& bytes) {
  const absl::Time start = absl::Now();
  for (char c : bytes) {
    if (::send(fd, &c, 1, MSG_NOSIGNAL) != 1) break;
    absl::SleepFor(absl::Milliseconds(100));
    char b;
    const ssize_t n = ::recv(fd, &b, 1, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) break;
  }
  return absl::Now() - start;
}

// Every stage has a deadline, not a per-read timeout: a client that
// trickles a byte every 100 ms (each read well within io_timeout) is cut
// off once io_timeout has passed, in the TLS handshake (before any
// certificate is checked) as in a plaintext request head, and the server
// stops promptly while such clients are connected.
TEST_F(HttpServerTest, ClientsThatTrickleBytesAreCutOffAtTheDeadline) {
  const std::string dir = ::testing::TempDir() + "/http-slow-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(InitClusterCa(dir + "/ca").ok());
  ASSERT_TRUE(IssueCertificate(dir + "/ca", "coordinator", "main", dir + "/main").ok());
  HttpServer::Options o;
  o.io_timeout = absl::Milliseconds(800);
  o.max_connections = 4;
  Start(o);
  int fd = Connect(server_->port());
  EXPECT_LT(TrickleUntilClosed(fd, "GET /metrics HTTP/1.1\r\nHost: localhost\r\nX-Slow: " +
                                       std::string(100, 'a')),
            absl::Seconds(3));
  ::close(fd);
  o.tls = *LoadTlsDir(dir + "/main");
  Start(o);
  // A TLS ClientHello's first bytes (record header), then one byte at a time.
  std::string hello("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11);
  hello += std::string(100, 'r');
  fd = Connect(server_->port());
  EXPECT_LT(TrickleUntilClosed(fd, hello), absl::Seconds(3));
  ::close(fd);
  // Stopping the server while tricklers are connected takes about the
  // deadline, not as long as they keep sending.
  std::vector<int> slow;
  for (int i = 0; i < 4; ++i) {
    slow.push_back(Connect(server_->port()));
    ASSERT_EQ(::send(slow.back(), hello.data(), 3, MSG_NOSIGNAL), 3);
  }
  absl::SleepFor(absl::Milliseconds(100));
  const absl::Time stop = absl::Now();
  server_.reset();
  EXPECT_LT(absl::Now() - stop, absl::Seconds(3));
  for (int s : slow) ::close(s);
  std::filesystem::remove_all(dir);
}

TEST(HttpServerStart, BadAndBusyAddressesAreClearErrors) {
  auto handler = [](const HttpRequest&) { return HttpResponse{}; };
  auto bad = HttpServer::Start({.listen = "127.0.0.1"}, handler);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("'127.0.0.1' is not HOST:PORT"));
  EXPECT_FALSE(HttpServer::Start({.listen = "127.0.0.1:99999"}, handler).ok());
  auto first = HttpServer::Start({.listen = "127.0.0.1:0"}, handler);
  ASSERT_TRUE(first.ok());
  auto second =
      HttpServer::Start({.listen = absl::StrCat("127.0.0.1:", (*first)->port())}, handler);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("cannot listen on 127.0.0.1:"));
}

}  // namespace
}  // namespace frameworm
