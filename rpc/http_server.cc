#include "rpc/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace frameworm {
namespace {

constexpr size_t kMaxHead = 8192;

const char* Reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 431: return "Request Header Fields Too Large";
    case 503: return "Service Unavailable";
    default: return "Error";
  }
}

void WriteAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the peer left or the write timed out
    done += static_cast<size_t>(n);
  }
}

void Respond(int fd, const HttpResponse& r, bool head) {
  std::string out = absl::StrCat("HTTP/1.1 ", r.status, " ", Reason(r.status),
                                 "\r\nContent-Type: ", r.content_type,
                                 "\r\nContent-Length: ", r.body.size(),
                                 "\r\nConnection: close\r\n\r\n");
  if (!head) out += r.body;
  WriteAll(fd, out);
}

HttpResponse Plain(int status, std::string body) {
  return HttpResponse{status, "text/plain; charset=utf-8", std::move(body) + "\n"};
}

}  // namespace

absl::Status ParseListenAddress(const std::string& address, std::string* host, int* port) {
  const size_t colon = address.rfind(':');
  auto bad = [&](const char* why) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", address.substr(0, 200), "' is not HOST:PORT (", why, ")"));
  };
  if (colon == std::string::npos || colon == 0) return bad("no host");
  std::string h = address.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  int p = 0;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &p) || p < 0 || p > 65535) {
    return bad("the port must be 0..65535");
  }
  *host = h;
  *port = p;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const Options& options,
                                                              Handler handler) {
  std::string host;
  int port = 0;
  if (absl::Status s = ParseListenAddress(options.listen, &host, &port); !s.ok()) return s;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0) {
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
}

void HttpServer::AcceptLoop() {
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    timeval tv = absl::ToTimeval(options_.io_timeout);
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    bool take = false;
    {
      absl::MutexLock l(&mu_);
      if (active_ < options_.max_connections) {
        ++active_;
        take = true;
      }
    }
    if (!take) {
      Respond(fd, Plain(503, "too many connections"), false);
      ::close(fd);
      continue;
    }
    std::thread([this, fd] {
      Serve(fd);
      ::close(fd);
      absl::MutexLock l(&mu_);
      --active_;
    }).detach();
  }
}

void HttpServer::Serve(int fd) {
  std::string head;
  char buf[2048];
  const absl::Time deadline = absl::Now() + options_.io_timeout;
  while (head.find("\r\n\r\n") == std::string::npos) {
    if (head.size() > kMaxHead) return Respond(fd, Plain(431, "request head over 8 KiB"), false);
    if (absl::Now() > deadline) return;  // a slow sender gets nothing
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    head.append(buf, static_cast<size_t>(n));
  }
  const std::string line = head.substr(0, head.find("\r\n"));
  std::vector<std::string> parts = absl::StrSplit(line, ' ');
  if (parts.size() != 3 || parts[2].rfind("HTTP/1.", 0) != 0 || parts[1].empty() ||
      parts[1][0] != '/') {
    return Respond(fd, Plain(400, "malformed request line"), false);
  }
  const bool head_only = parts[0] == "HEAD";
  if (parts[0] != "GET" && !head_only) {
    return Respond(fd, Plain(405, "only GET and HEAD"), false);
  }
  std::string path = parts[1].substr(0, parts[1].find('?'));
  Respond(fd, handler_(path), head_only);
}

absl::StatusOr<std::string> HttpExchange(const std::string& host_port, const std::string& request,
                                         absl::Duration timeout) {
  std::string host;
  int port = 0;
  if (absl::Status s = ParseListenAddress(host_port, &host, &port); !s.ok()) return s;
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
  WriteAll(fd, request);
  std::string out;
  char buf[16384];
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || absl::Now() > deadline)) {
      ::close(fd);
      return absl::DeadlineExceededError(absl::StrCat("no whole answer from ", host_port));
    }
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > (size_t{64} << 20)) break;
  }
  ::close(fd);
  return out;
}

absl::StatusOr<HttpResponse> HttpGet(const std::string& host_port, const std::string& path,
                                     absl::Duration timeout) {
  absl::StatusOr<std::string> raw = HttpExchange(
      host_port, absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: ", host_port,
                              "\r\nConnection: close\r\n\r\n"),
      timeout);
  if (!raw.ok()) return raw.status();
  HttpResponse r;
  const size_t end = raw->find("\r\n\r\n");
  std::vector<std::string> status = absl::StrSplit(raw->substr(0, raw->find("\r\n")), ' ');
  if (end == std::string::npos || status.size() < 2 || !absl::SimpleAtoi(status[1], &r.status)) {
    return absl::InternalError(absl::StrCat("not an HTTP response from ", host_port, ": '",
                                            raw->substr(0, 80), "'"));
  }
  r.body = raw->substr(end + 4);
  return r;
}

}  // namespace frameworm
