// Which of this machine's addresses faces a given peer, and which network
// interface holds an address. Used to bind collective backends (Gloo, NCCL's
// bootstrap) to the address the other ranks can reach, rather than to what
// the machine's hostname resolves to (127.0.1.1 on Debian's /etc/hosts).
#ifndef FRAMEWORM_COMMON_NODE_ADDRESS_H_
#define FRAMEWORM_COMMON_NODE_ADDRESS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace frameworm {

// The local IPv4/IPv6 address the kernel would use as the source of traffic
// to `host` (a name or a literal address; resolved here). No packet is sent:
// the answer comes from the routing table (a connected UDP socket).
// NotFound when `host` does not resolve, Unavailable when no route leads there.
absl::StatusOr<std::string> AddressToward(const std::string& host);

// The name of the interface holding `address` (e.g. "eth0", "lo").
// NotFound when no interface holds it.
absl::StatusOr<std::string> InterfaceOf(const std::string& address);

// The address a node advertises for `endpoint` ("host:port", "[v6]:port"):
// AddressToward(host). InvalidArgument when `endpoint` has no ":port".
absl::StatusOr<std::string> AddressTowardEndpoint(const std::string& endpoint);

// Splits "HOST:PORT" ("[v6]:PORT" too; brackets removed from the host).
// INVALID_ARGUMENT naming the text when it has no host or its port is not
// a number in 0..65535 (gRPC would take "host:99999" as port 34463).
absl::Status ParseHostPort(const std::string& endpoint, std::string* host, int* port);

// Whether `endpoint` is an address to dial: ParseHostPort accepts it and its
// port is 1..65535 (0 means "any" only where a server listens).
bool IsDialEndpoint(const std::string& endpoint);

// Whether `endpoint` names a TCP peer and nothing else: IsDialEndpoint, and
// its host is a DNS name or IPv4 address (A-Z a-z 0-9 . _ -, at most 253
// characters) or a bracketed IPv6 literal ("[fe80::1%eth0]:7071"). gRPC
// reads "unix:/path:1" or "unix-abstract:name:1" as local sockets and
// "ipv4:..." as address lists: an endpoint one peer gives others to dial
// must be none of these.
bool IsNetworkEndpoint(const std::string& endpoint);

// The host part of "host:port" / "[v6]:port" (brackets removed); the whole
// text when it has no ':'.
std::string HostOfEndpoint(const std::string& endpoint);

// True for loopback hosts: "localhost", 127.0.0.0/8, "::1" (bracketed too).
bool IsLoopbackHost(const std::string& host);

// True for the hosts a server listens on to mean "every interface":
// "0.0.0.0", "::", "[::]", "" and "*". Such a host is no address to give a peer.
bool IsWildcardHost(const std::string& host);

}  // namespace frameworm

#endif  // FRAMEWORM_COMMON_NODE_ADDRESS_H_
