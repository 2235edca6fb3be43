#include "rpc/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/node_address.h"
#include "common/printable.h"

namespace frameworm {

// One connection's byte stream: the socket, or TLS over it (owns the SSL,
// not the socket). Used by the server and by HttpExchange.
class HttpServer::Conn {
 public:
  // With a finite `deadline` the socket must be non-blocking: every read,
  // write and the TLS handshake waits (poll) only until the deadline, so a
  // peer that trickles bytes cannot hold the connection longer. Without
  // one (a blocking socket with SO_RCVTIMEO/SO_SNDTIMEO) each call is
  // bounded by those timeouts alone.
  Conn(int fd, SSL* ssl, absl::Time deadline = absl::InfiniteFuture())
      : fd_(fd), ssl_(ssl), deadline_(deadline) {}
  ~Conn() {
    if (ssl_ != nullptr) {
      // Best effort, and never after a failed read or write (OpenSSL's rule:
      // a reset peer's socket would take the close_notify as EPIPE).
      if (SSL_is_init_finished(ssl_) && !failed_) SSL_shutdown(ssl_);
      ERR_clear_error();
      SSL_free(ssl_);
    }
  }
  void set_deadline(absl::Time deadline) { deadline_ = deadline; }
  // The server side of the TLS handshake; false on any failure or past the
  // deadline.
  bool Accept() {
    for (;;) {
      const int r = SSL_accept(ssl_);
      if (r == 1) return true;
      if (!WaitFor(SSL_get_error(ssl_, r))) {
        ERR_clear_error();
        return false;
      }
    }
  }
  // > 0 bytes read, 0 at the end, < 0 on an error or a timeout.
  ssize_t Read(char* buf, size_t n) {
    for (;;) {
      if (ssl_ != nullptr) {
        const int r = SSL_read(ssl_, buf, static_cast<int>(n));
        if (r > 0 || !WaitFor(SSL_get_error(ssl_, r))) return r;
        continue;
      }
      const ssize_t r = ::recv(fd_, buf, n, 0);
      if (r >= 0) return r;
      if (errno == EINTR) continue;
      if ((errno == EAGAIN || errno == EWOULDBLOCK) && Wait(POLLIN)) continue;
      return -1;
    }
  }
  void WriteAll(const std::string& data) {
    size_t done = 0;
    while (done < data.size()) {
      if (ssl_ != nullptr) {
        const int n = SSL_write(ssl_, data.data() + done, static_cast<int>(data.size() - done));
        if (n > 0) {
          done += static_cast<size_t>(n);
        } else if (!WaitFor(SSL_get_error(ssl_, n))) {
          return;  // the peer left or the deadline passed
        }
        continue;
      }
      const ssize_t n = ::send(fd_, data.data() + done, data.size() - done, MSG_NOSIGNAL);
      if (n > 0) {
        done += static_cast<size_t>(n);
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else if (!(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && Wait(POLLOUT))) {
        return;
      }
    }
  }

 private:
  // Waits, within the deadline, for what OpenSSL's error `e` asks for.
  bool WaitFor(int e) {
    if (e == SSL_ERROR_WANT_READ && Wait(POLLIN)) return true;
    if (e == SSL_ERROR_WANT_WRITE && Wait(POLLOUT)) return true;
    failed_ = e != SSL_ERROR_ZERO_RETURN;  // the peer's clean close_notify is no failure
    return false;
  }
  // The socket is ready for `events` before the deadline (never without
  // one: a blocking socket's timeout already expired).
  bool Wait(short events) {
    if (deadline_ == absl::InfiniteFuture()) return false;
    for (;;) {
      const int64_t ms = absl::ToInt64Milliseconds(deadline_ - absl::Now());
      if (ms <= 0) return false;
      pollfd p{fd_, events, 0};
      const int r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(ms, 1000)));
      if (r > 0) return true;
      if (r < 0 && errno != EINTR) return false;
    }
  }

  const int fd_;
  SSL* const ssl_;
  absl::Time deadline_;
  bool failed_ = false;  // a TLS read, write or handshake failed or timed out
};

namespace {

constexpr size_t kMaxHead = 8192;

const char* Reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 431: return "Request Header Fields Too Large";
    case 503: return "Service Unavailable";
    default: return "Error";
  }
}

std::string ResponseBytes(const HttpResponse& r, bool head) {
  std::string out = absl::StrCat("HTTP/1.1 ", r.status, " ", Reason(r.status),
                                 "\r\nContent-Type: ", r.content_type,
                                 "\r\nContent-Length: ", r.body.size(),
                                 "\r\nCache-Control: no-store"
                                 "\r\nX-Content-Type-Options: nosniff"
                                 "\r\nConnection: close\r\n");
  for (const auto& [name, value] : r.headers) absl::StrAppend(&out, name, ": ", value, "\r\n");
  out += "\r\n";
  if (!head) out += r.body;
  return out;
}

HttpResponse Plain(int status, std::string body) {
  return HttpResponse{status, "text/plain; charset=utf-8", std::move(body) + "\n"};
}

std::string OpenSslError() {
  char buf[256] = "unknown error";
  if (unsigned long e = ERR_get_error(); e != 0) ERR_error_string_n(e, buf, sizeof(buf));
  ERR_clear_error();
  return buf;
}

// An SSL_CTX presenting tls's certificate and trusting only its CA.
absl::StatusOr<SSL_CTX*> MakeContext(const TlsFiles& tls, bool server) {
  SSL_CTX* ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
  if (ctx == nullptr) return absl::InternalError("SSL_CTX_new: " + OpenSslError());
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  auto fail = [&](const std::string& what) {
    SSL_CTX_free(ctx);
    return absl::InvalidArgumentError(absl::StrCat(what, " in ", tls.dir, ": ", OpenSslError()));
  };
  BIO* cert_bio = BIO_new_mem_buf(tls.cert_pem.data(), static_cast<int>(tls.cert_pem.size()));
  X509* cert = PEM_read_bio_X509(cert_bio, nullptr, nullptr, nullptr);
  BIO_free(cert_bio);
  const bool cert_ok = cert != nullptr && SSL_CTX_use_certificate(ctx, cert) == 1;
  X509_free(cert);
  if (!cert_ok) return fail("tls.crt is not usable");
  BIO* key_bio = BIO_new_mem_buf(tls.key_pem.data(), static_cast<int>(tls.key_pem.size()));
  EVP_PKEY* key = PEM_read_bio_PrivateKey(key_bio, nullptr, nullptr, nullptr);
  BIO_free(key_bio);
  const bool key_ok = key != nullptr && SSL_CTX_use_PrivateKey(ctx, key) == 1;
  EVP_PKEY_free(key);
  if (!key_ok || SSL_CTX_check_private_key(ctx) != 1) return fail("tls.key does not match tls.crt");
  BIO* ca_bio = BIO_new_mem_buf(tls.ca_pem.data(), static_cast<int>(tls.ca_pem.size()));
  X509* ca = PEM_read_bio_X509(ca_bio, nullptr, nullptr, nullptr);
  BIO_free(ca_bio);
  const bool ca_ok = ca != nullptr && X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx), ca) == 1;
  X509_free(ca);
  if (!ca_ok) return fail("ca.crt is not usable");
  SSL_CTX_set_verify(ctx, server ? SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT : SSL_VERIFY_PEER,
                     nullptr);
  if (server) {
    // No session resumption (no tickets, no cache): every connection's full
    // handshake checks the client's certificate, its expiry included (the
    // dashboard reconnects for every request).
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
    SSL_CTX_set_num_tickets(ctx, 0);
  }
  return ctx;
}

// The role and name of the verified peer certificate's common name.
Caller PeerCaller(SSL* ssl) {
  X509* peer = SSL_get1_peer_certificate(ssl);
  if (peer == nullptr || SSL_get_verify_result(ssl) != X509_V_OK) {
    X509_free(peer);
    return Caller{};
  }
  char cn[256] = {0};
  const int n = X509_NAME_get_text_by_NID(X509_get_subject_name(peer), NID_commonName, cn,
                                          sizeof(cn));
  X509_free(peer);
  if (n <= 0) return Caller{};
  return Caller::FromCommonName(std::string(cn, static_cast<size_t>(n)));
}

}  // namespace

absl::Status CheckMetricsListen(const std::string& address, bool insecure) {
  if (address == "none") return absl::OkStatus();
  std::string host;
  int port = 0;
  if (!ParseHostPort(address, &host, &port).ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics-listen must be HOST:PORT or none, got '", address, "'"));
  }
  if (IsLoopbackHost(host) || insecure) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "--metrics-listen=", address,
      " is off loopback: the metrics endpoint is plaintext HTTP without authentication. "
      "Scrape it from this host (127.0.0.1), or add --metrics-insecure on a network only "
      "your monitoring reaches"));
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const Options& options,
                                                              Handler handler) {
  std::string host;
  int port = 0;
  if (absl::Status s = ParseHostPort(options.listen, &host, &port); !s.ok()) return s;
  SSL_CTX* ctx = nullptr;
  if (options.tls) {
    absl::StatusOr<SSL_CTX*> made = MakeContext(*options.tls, true);
    if (!made.ok()) return made.status();
    ctx = *made;
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    SSL_CTX_free(ctx);
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve '", host, "' to listen on: ", gai_strerror(rc)));
  }
  int fd = -1;
  std::string error = "no address";
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 64) != 0) {
      error = std::strerror(errno);
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd < 0) {
    SSL_CTX_free(ctx);
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.listen, " for HTTP: ", error));
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  const int bound_port = ntohs(bound.ss_family == AF_INET6
                                   ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                   : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  std::unique_ptr<HttpServer> server(new HttpServer(fd, bound_port, options, std::move(handler)));
  server->ssl_ctx_ = ctx;
  server->loopback_guard_ = ctx == nullptr && IsLoopbackHost(host);
  if (::pipe2(server->wake_, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  server->acceptor_ = std::thread([s = server.get()] { s->AcceptLoop(); });
  return server;
}

HttpServer::HttpServer(int fd, int port, const Options& options, Handler handler)
    : listen_fd_(fd), port_(port), options_(options), handler_(std::move(handler)) {}

HttpServer::~HttpServer() {
  if (acceptor_.joinable()) {
    char b = 0;
    while (::write(wake_[1], &b, 1) < 0 && errno == EINTR) {
    }
    acceptor_.join();
  }
  {
    absl::MutexLock l(&mu_);
    mu_.Await(absl::Condition(+[](int* n) { return *n == 0; }, &active_));
  }
  ::close(listen_fd_);
  for (int fd : wake_)
    if (fd >= 0) ::close(fd);
  SSL_CTX_free(static_cast<SSL_CTX*>(ssl_ctx_));
}

namespace {

// The numeric host of an accepted peer ("" when it has none).
std::string PeerHost(const sockaddr_storage& a) {
  char host[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(a).sin_addr, host, sizeof(host));
  } else if (a.ss_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(a).sin6_addr, host, sizeof(host));
  }
  return host;
}

}  // namespace

void HttpServer::AcceptLoop() {
  // This thread and the connection threads it starts (they inherit its
  // mask) block SIGPIPE: OpenSSL writes with write(), not send() with
  // MSG_NOSIGNAL, so a peer that reset its connection would otherwise kill
  // a process that does not ignore SIGPIPE.
  sigset_t pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    // Non-blocking: Conn bounds each stage by a deadline (see Serve).
    sockaddr_storage from{};
    socklen_t from_len = sizeof(from);
    const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&from), &from_len,
                             SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      // Out of descriptors or memory: the listener stays readable, so wait
      // for some to free instead of spinning.
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        absl::SleepFor(absl::Milliseconds(100));
      }
      continue;
    }
    const std::string peer = PeerHost(from);
    bool take = false;
    {
      absl::MutexLock l(&mu_);
      int& mine = active_per_peer_[peer];
      if (active_ < options_.max_connections && mine < options_.max_connections_per_peer) {
        ++active_;
        ++mine;
        take = true;
      } else if (mine == 0) {
        active_per_peer_.erase(peer);
      }
    }
    if (!take) {
      if (ssl_ctx_ == nullptr) {
        const std::string busy = ResponseBytes(Plain(503, "too many connections"), false);
        ::send(fd, busy.data(), busy.size(), MSG_NOSIGNAL);
      }
      ::close(fd);
      continue;
    }
    std::thread([this, fd, peer] {
      Serve(fd);
      ::close(fd);
      absl::MutexLock l(&mu_);
      --active_;
      if (auto it = active_per_peer_.find(peer); it != active_per_peer_.end() && --it->second <= 0) {
        active_per_peer_.erase(it);
      }
    }).detach();
  }
}

// Deadlines: the TLS handshake and the request head together get
// io_timeout from the accept; writing the response gets io_timeout from
// when it is ready. A peer that trickles bytes is cut off at the deadline.
void HttpServer::Serve(int fd) {
  const absl::Time deadline = absl::Now() + options_.io_timeout;
  if (ssl_ctx_ == nullptr) {
    Conn conn(fd, nullptr, deadline);
    Caller local;
    local.role = Caller::Role::kLocal;
    return Serve(conn, local);
  }
  SSL* ssl = SSL_new(static_cast<SSL_CTX*>(ssl_ctx_));
  if (ssl == nullptr) return;
  SSL_set_fd(ssl, fd);
  Conn conn(fd, ssl, deadline);  // owns ssl now
  if (!conn.Accept()) return;  // no or a foreign certificate, or too slow
  Serve(conn, PeerCaller(ssl));
}

namespace {

// The Host header's value in a request head (the first, trimmed); none
// when the head has no such line.
std::optional<std::string> HostHeader(const std::string& head) {
  for (absl::string_view line : absl::StrSplit(head, "\r\n")) {
    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos || !absl::EqualsIgnoreCase(line.substr(0, colon), "host")) {
      continue;
    }
    return std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
  }
  return std::nullopt;
}

}  // namespace

void HttpServer::Serve(Conn& conn, const Caller& caller) {
  std::string head;
  char buf[2048];
  auto respond = [&](const HttpResponse& r, bool head_only) {
    conn.set_deadline(absl::Now() + options_.io_timeout);
    conn.WriteAll(ResponseBytes(r, head_only));
  };
  while (head.find("\r\n\r\n") == std::string::npos) {
    if (head.size() > kMaxHead) return respond(Plain(431, "request head over 8 KiB"), false);
    ssize_t n = conn.Read(buf, sizeof(buf));
    if (n <= 0) return;
    head.append(buf, static_cast<size_t>(n));
  }
  const std::string line = head.substr(0, head.find("\r\n"));
  std::vector<std::string> parts = absl::StrSplit(line, ' ');
  if (parts.size() != 3 || parts[2].rfind("HTTP/1.", 0) != 0 || parts[1].empty() ||
      parts[1][0] != '/') {
    return respond(Plain(400, "malformed request line"), false);
  }
  const bool head_only = parts[0] == "HEAD";
  if (parts[0] != "GET" && !head_only) return respond(Plain(405, "only GET and HEAD"), false);
  if (loopback_guard_) {
    if (std::optional<std::string> host = HostHeader(head);
        host && !IsLoopbackHost(absl::AsciiStrToLower(HostOfEndpoint(*host)))) {
      return respond(Plain(403, absl::StrCat("Host '", PrintableLine(*host, 80),
                                             "' is not a loopback name: this plaintext server "
                                             "answers only requests for localhost or 127.0.0.1 "
                                             "(another name may be a web page's DNS rebinding)")),
                     false);
    }
  }
  HttpRequest request;
  const size_t q = parts[1].find('?');
  request.path = parts[1].substr(0, q);
  if (q != std::string::npos) request.query = parts[1].substr(q + 1);
  request.caller = caller;
  respond(handler_(request), head_only);
}

absl::StatusOr<std::string> HttpExchange(const std::string& host_port, const std::string& request,
                                         absl::Duration timeout, const TlsFiles* tls,
                                         const char* server_name) {
  std::string host;
  int port = 0;
  if (absl::Status s = ParseHostPort(host_port, &host, &port); !s.ok()) return s;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 ||
      found == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot resolve ", host));
  }
  int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  timeval tv = absl::ToTimeval(timeout);
  if (fd >= 0) {
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  }
  const bool connected = fd >= 0 && ::connect(fd, found->ai_addr, found->ai_addrlen) == 0;
  ::freeaddrinfo(found);
  if (!connected) {
    const std::string why = std::strerror(errno);
    if (fd >= 0) ::close(fd);
    return absl::UnavailableError(absl::StrCat("cannot connect to ", host_port, ": ", why));
  }
  SSL_CTX* ctx = nullptr;
  SSL* ssl = nullptr;
  auto done = [&] {
    if (ssl != nullptr) SSL_free(ssl);
    SSL_CTX_free(ctx);
    ::close(fd);
  };
  if (tls != nullptr) {
    absl::StatusOr<SSL_CTX*> made = MakeContext(*tls, false);
    if (!made.ok()) {
      done();
      return made.status();
    }
    ctx = *made;
    ssl = SSL_new(ctx);
    SSL_set_fd(ssl, fd);
    SSL_set1_host(ssl, server_name);
    if (SSL_connect(ssl) != 1) {
      const std::string why = OpenSslError();
      done();
      return absl::UnavailableError(absl::StrCat("TLS with ", host_port, " failed: ", why));
    }
  }
  std::string out;
  bool timed_out = false;
  {
    HttpServer::Conn conn(fd, ssl);  // takes the SSL
    ssl = nullptr;
    conn.WriteAll(request);
    char buf[16384];
    const absl::Time deadline = absl::Now() + timeout;
    for (;;) {
      ssize_t n = conn.Read(buf, sizeof(buf));
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || absl::Now() > deadline)) {
        timed_out = true;
        break;
      }
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
      if (out.size() > (size_t{64} << 20)) break;
    }
  }
  done();
  if (timed_out) return absl::DeadlineExceededError(absl::StrCat("no whole answer from ", host_port));
  return out;
}

absl::StatusOr<HttpResponse> HttpGet(const std::string& host_port, const std::string& path,
                                     absl::Duration timeout, const TlsFiles* tls) {
  absl::StatusOr<std::string> raw = HttpExchange(
      host_port, absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: ", host_port,
                              "\r\nConnection: close\r\n\r\n"),
      timeout, tls);
  if (!raw.ok()) return raw.status();
  HttpResponse r;
  const size_t end = raw->find("\r\n\r\n");
  std::vector<std::string> status = absl::StrSplit(raw->substr(0, raw->find("\r\n")), ' ');
  if (end == std::string::npos || status.size() < 2 || !absl::SimpleAtoi(status[1], &r.status)) {
    return absl::InternalError(absl::StrCat("not an HTTP response from ", host_port, ": '",
                                            raw->substr(0, 80), "'"));
  }
  r.body = raw->substr(end + 4);
  const size_t ct = raw->find("Content-Type: ");
  if (ct != std::string::npos && ct < end) {
    r.content_type = raw->substr(ct + 14, raw->find("\r\n", ct) - ct - 14);
  }
  return r;
}

}  // namespace frameworm
