#include "common/node_address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/printable.h"

namespace frameworm {
namespace {

std::string Numeric(const sockaddr* sa, socklen_t len) {
  char buf[NI_MAXHOST] = {0};
  if (getnameinfo(sa, len, buf, sizeof(buf), nullptr, 0, NI_NUMERICHOST) != 0) return "";
  return buf;
}

}  // namespace

absl::StatusOr<std::string> AddressToward(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), "9", &hints, &res);
  if (rc != 0 || res == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("address '", host, "' does not resolve: ", gai_strerror(rc)));
  }
  std::string last_error;
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      last_error = std::strerror(errno);
      close(fd);
      continue;
    }
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    const bool ok = getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0;
    close(fd);
    if (!ok) continue;
    std::string out = Numeric(reinterpret_cast<sockaddr*>(&local), len);
    if (!out.empty()) {
      freeaddrinfo(res);
      return out;
    }
  }
  freeaddrinfo(res);
  return absl::UnavailableError(
      absl::StrCat("no route from this machine to '", host, "': ", last_error));
}

absl::StatusOr<std::string> InterfaceOf(const std::string& address) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    return absl::InternalError(absl::StrCat("getifaddrs: ", std::strerror(errno)));
  }
  std::string found;
  for (ifaddrs* i = list; i != nullptr && found.empty(); i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    const int fam = i->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    const socklen_t len = fam == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    if (Numeric(i->ifa_addr, len) == address) found = i->ifa_name;
  }
  freeifaddrs(list);
  if (found.empty()) {
    return absl::NotFoundError(
        absl::StrCat("no network interface of this machine holds address ", address));
  }
  return found;
}

std::string HostOfEndpoint(const std::string& endpoint) {
  const size_t colon = endpoint.rfind(':');
  std::string host = colon == std::string::npos ? endpoint : endpoint.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return host;
}

bool IsLoopbackHost(const std::string& host) {
  if (host == "localhost" || host == "::1" || host == "[::1]") return true;
  in_addr a{};
  return inet_pton(AF_INET, host.c_str(), &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

bool IsWildcardHost(const std::string& host) {
  return host.empty() || host == "0.0.0.0" || host == "::" || host == "[::]" ||
         host == "*";
}

absl::Status ParseHostPort(const std::string& address, std::string* host, int* port) {
  const size_t colon = address.rfind(':');
  auto bad = [&](const char* why) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", PrintableLine(address, 200), "' is not HOST:PORT (", why, ")"));
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

bool IsDialEndpoint(const std::string& endpoint) {
  std::string host;
  int port = 0;
  return ParseHostPort(endpoint, &host, &port).ok() && port > 0;
}

bool IsNetworkEndpoint(const std::string& endpoint) {
  if (!IsDialEndpoint(endpoint)) return false;
  const std::string host = endpoint.substr(0, endpoint.rfind(':'));
  constexpr char kName[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-";
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {  // IPv6 (%zone)
    const std::string inner = host.substr(1, host.size() - 2);
    return inner.find(':') != std::string::npos &&
           inner.find_first_not_of(absl::StrCat(kName, ":%")) == std::string::npos;
  }
  return !host.empty() && host.size() <= 253 && host.find_first_not_of(kName) == std::string::npos;
}

absl::StatusOr<std::string> AddressTowardEndpoint(const std::string& endpoint) {
  std::string host;
  int port = 0;
  if (absl::Status s = ParseHostPort(endpoint, &host, &port); !s.ok()) return s;
  return AddressToward(host);
}

}  // namespace frameworm
