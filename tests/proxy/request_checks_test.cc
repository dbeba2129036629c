// CheckHead / CheckRequestHead: request heads that fencegate and a backend
// could read differently are refused before routing.

#include "proxy/request_checks.h"

#include <gtest/gtest.h>

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <string>

namespace fencegate::proxy {
namespace {

namespace http = boost::beast::http;

http::request_header<> Parse(const std::string& head) {
  http::request_parser<http::empty_body> parser;
  boost::beast::error_code ec;
  parser.put(boost::asio::buffer(head), ec);
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_TRUE(parser.is_header_done());
  return parser.release().base();
}

TEST(RequestChecks, OriginFormIsCanonicalized) {
  CanonicalTarget target;
  HeadProblem p = CheckHead(Parse("PUT /objects//a/./b?x=1 HTTP/1.1\r\nHost: x\r\n\r\n"), &target);
  EXPECT_TRUE(p.ok()) << p.message;
  EXPECT_EQ(target.path, "/objects/a/b");
  EXPECT_EQ(target.query, "x=1");
}

TEST(RequestChecks, BadPathKeepsTheConnectionAmbiguousFramingClosesIt) {
  CanonicalTarget target;
  HeadProblem p = CheckHead(Parse("GET /../x HTTP/1.1\r\nHost: x\r\n\r\n"), &target);
  EXPECT_EQ(p.code, "bad_path");
  EXPECT_FALSE(p.close);
  p = CheckHead(Parse("GET http://other/x HTTP/1.1\r\nHost: x\r\n\r\n"), &target);
  EXPECT_EQ(p.code, "bad_path");
  EXPECT_TRUE(p.close);
  p = CheckHead(Parse("GET /x HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n"), &target);
  EXPECT_EQ(p.code, "bad_request");
  EXPECT_TRUE(p.close);
}

// Found by fuzz_request: two Host fields were refused only on HTTP/1.1; an
// HTTP/1.0 request with two (the second one malformed, since only the first
// was checked) was forwarded upstream as HTTP/1.1 with both.
TEST(RequestChecks, TwoHostsAreRefusedOnHttp10Too) {
  const std::string head =
      "PUT /objects/t2 HTTP/1.0\r\nHost: x\r\nHost: Content-Length: 1\r\n\r\n";
  EXPECT_EQ(CheckRequestHead(Parse(head)), "more than one Host header");
  // One Host, or none, is still fine on HTTP/1.0.
  EXPECT_EQ(CheckRequestHead(Parse("GET / HTTP/1.0\r\nHost: x\r\n\r\n")), "");
  EXPECT_EQ(CheckRequestHead(Parse("GET / HTTP/1.0\r\n\r\n")), "");
}

}  // namespace
}  // namespace fencegate::proxy
