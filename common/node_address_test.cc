#include "common/node_address.h"

#include "gtest/gtest.h"

namespace frameworm {
namespace {

TEST(NodeAddressTest, LoopbackPeerIsReachedFromLoopback) {
  auto a = AddressToward("127.0.0.1");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a, "127.0.0.1");
  auto i = InterfaceOf(*a);
  ASSERT_TRUE(i.ok()) << i.status();
  EXPECT_EQ(*i, "lo");
}

TEST(NodeAddressTest, OtherLoopbackAddressIsReachedThroughLo) {
  auto a = AddressToward("127.0.1.1");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(a->rfind("127.", 0) == 0) << *a;
}

TEST(NodeAddressTest, UnresolvableNameIsNotFoundAndNamesTheHost) {
  auto a = AddressToward("no-such-host.invalid");
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(a.status().message().find("no-such-host.invalid"), std::string::npos);
}

TEST(NodeAddressTest, AddressNoInterfaceHoldsIsNotFound) {
  auto i = InterfaceOf("192.0.2.77");  // TEST-NET-1: never configured here
  ASSERT_FALSE(i.ok());
  EXPECT_EQ(i.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(i.status().message().find("192.0.2.77"), std::string::npos);
}

TEST(NodeAddressTest, EndpointsAreSplitIntoTheirHost) {
  auto v4 = AddressTowardEndpoint("127.0.0.1:7070");
  ASSERT_TRUE(v4.ok()) << v4.status();
  EXPECT_EQ(*v4, "127.0.0.1");
  auto v6 = AddressTowardEndpoint("[::1]:7070");
  if (v6.ok()) EXPECT_EQ(*v6, "::1");  // hosts without IPv6 answer an error
  for (const char* bad : {"127.0.0.1", ":7070", "host:"}) {
    auto r = AddressTowardEndpoint(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find(bad), std::string::npos) << r.status();
  }
}

TEST(NodeAddressTest, WildcardHostsAreNoPeerAddress) {
  for (const char* h : {"0.0.0.0", "::", "[::]", "", "*"}) EXPECT_TRUE(IsWildcardHost(h)) << h;
  for (const char* h : {"127.0.0.1", "10.0.0.1", "::1", "coord"}) {
    EXPECT_FALSE(IsWildcardHost(h)) << h;
  }
}

TEST(NodeAddressTest, LoopbackHostsAndEndpointHosts) {
  for (const char* h : {"localhost", "127.0.0.1", "127.1.2.3", "::1", "[::1]"}) {
    EXPECT_TRUE(IsLoopbackHost(h)) << h;
  }
  for (const char* h : {"0.0.0.0", "10.0.0.1", "128.0.0.1", "::", "example.com", ""}) {
    EXPECT_FALSE(IsLoopbackHost(h)) << h;
  }
  EXPECT_EQ(HostOfEndpoint("10.0.0.1:7070"), "10.0.0.1");
  EXPECT_EQ(HostOfEndpoint("[::1]:7070"), "::1");
  EXPECT_EQ(HostOfEndpoint("host"), "host");
}

}  // namespace
}  // namespace frameworm

namespace frameworm {
namespace {

TEST(NodeAddressTest, ANetworkEndpointIsATcpPeerAndNoOtherGrpcTarget) {
  for (const char* ok : {"w0.host:7071", "10.0.0.2:1", "node_3-a.example.com:65535",
                         "[::1]:7071", "[fe80::1%eth0]:7071"}) {
    EXPECT_TRUE(IsNetworkEndpoint(ok)) << ok;
  }
  for (const char* bad : {"unix:/tmp/sock:1", "unix-abstract:evil:1", "ipv4:10.0.0.1:80,10.0.0.2:1",
                          "dns:///w0:7071", "w0:0", "w0:65536", "w0", ":7071", "[]:7071",
                          "[w0]:7071", "::1:7071", "w 0:7071", "w0/x:7071", "[::1]x:7071"}) {
    EXPECT_FALSE(IsNetworkEndpoint(bad)) << bad;
  }
  EXPECT_FALSE(IsNetworkEndpoint(std::string(254, 'a') + ":1"));
}

}  // namespace
}  // namespace frameworm
