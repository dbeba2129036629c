// ParseEndpoint and Endpoint::ToString: tables of good and bad addresses.

#include <gtest/gtest.h>

#include "config/config.h"

namespace fencegate::config {
namespace {

struct EndpointCase {
  const char* text;
  const char* host;
  uint16_t port;
  const char* formatted;
};

TEST(ParseEndpointTest, AcceptsLiteralAddresses) {
  const EndpointCase cases[] = {
      {"127.0.0.1:8080", "127.0.0.1", 8080, "127.0.0.1:8080"},
      {"0.0.0.0:0", "0.0.0.0", 0, "0.0.0.0:0"},
      {"[::1]:0", "::1", 0, "[::1]:0"},
      {"[::]:443", "::", 443, "[::]:443"},
      {"[2001:db8::1]:65535", "2001:db8::1", 65535, "[2001:db8::1]:65535"},
      {"[::ffff:10.0.0.1]:80", "::ffff:10.0.0.1", 80, "[::ffff:10.0.0.1]:80"},
      {"localhost:80", "localhost", 80, "localhost:80"},
      {"10.1.2.3:00080", "10.1.2.3", 80, "10.1.2.3:80"},
  };
  for (const EndpointCase& c : cases) {
    std::optional<Endpoint> endpoint = ParseEndpoint(c.text);
    ASSERT_TRUE(endpoint.has_value()) << c.text;
    EXPECT_EQ(endpoint->host, c.host) << c.text;
    EXPECT_EQ(endpoint->port, c.port) << c.text;
    EXPECT_EQ(endpoint->ToString(), c.formatted) << c.text;
  }
}

TEST(ParseEndpointTest, RejectsMalformedAddresses) {
  const char* cases[] = {
      "",
      "127.0.0.1",          // no port
      "127.0.0.1:",         // empty port
      ":8080",              // no host
      "127.0.0.1:65536",    // port too large
      "127.0.0.1:123456",   // too many digits
      "127.0.0.1:-1",       // sign
      "127.0.0.1:+80",      // sign
      "127.0.0.1:8o",       // not a digit
      "127.0.0.1: 80",      // space
      "127.0.0.1:0x50",     // hex
      "::1:80",             // IPv6 without brackets
      "[::1]",              // no port
      "[::1]80",            // no colon
      "[::1:80",            // unbalanced bracket
      "[127.0.0.1]:80",     // IPv4 in brackets
      "[fe80::1%eth0]:80",  // zone ids not supported
      "256.0.0.1:80",       // not an IPv4 address
      "1.2.3:80",           // short dotted form
      "example.com:80",     // names other than localhost
      "LOCALHOST:80",       // exact spelling only
      "localhost",          // no port
      " 127.0.0.1:80",      // leading space
  };
  for (const char* text : cases) {
    EXPECT_FALSE(ParseEndpoint(text).has_value()) << '"' << text << '"';
  }
}

TEST(EndpointTest, ToStringBracketsIpv6Only) {
  EXPECT_EQ((Endpoint{"::1", 9}).ToString(), "[::1]:9");
  EXPECT_EQ((Endpoint{"127.0.0.1", 9}).ToString(), "127.0.0.1:9");
  EXPECT_EQ((Endpoint{"localhost", 0}).ToString(), "localhost:0");
}

TEST(EndpointTest, ToStringRoundTripsThroughParse) {
  for (const char* text : {"127.0.0.1:8080", "[::1]:0", "localhost:80", "[2001:db8::2]:1"}) {
    std::optional<Endpoint> endpoint = ParseEndpoint(text);
    ASSERT_TRUE(endpoint.has_value()) << text;
    std::optional<Endpoint> again = ParseEndpoint(endpoint->ToString());
    ASSERT_TRUE(again.has_value()) << text;
    EXPECT_EQ(*again, *endpoint) << text;
  }
}

}  // namespace
}  // namespace fencegate::config
