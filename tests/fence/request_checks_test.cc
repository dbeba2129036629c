// CheckHead / CheckRequestHead: request heads that fencegate and a backend
// could read differently are refused before routing.

#include "fence/request_checks.h"

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

// Two Host fields are refused on HTTP/1.0 as on HTTP/1.1: otherwise an
// HTTP/1.0 request with two (the second one malformed, as only the first is
// checked) would go upstream as HTTP/1.1 with both (a fuzz_request case).
TEST(RequestChecks, TwoHostsAreRefusedOnHttp10Too) {
  const std::string head =
      "PUT /objects/t2 HTTP/1.0\r\nHost: x\r\nHost: Content-Length: 1\r\n\r\n";
  EXPECT_EQ(CheckRequestHead(Parse(head)), "more than one Host header");
  // One Host, or none, is still fine on HTTP/1.0.
  EXPECT_EQ(CheckRequestHead(Parse("GET / HTTP/1.0\r\nHost: x\r\n\r\n")), "");
  EXPECT_EQ(CheckRequestHead(Parse("GET / HTTP/1.0\r\n\r\n")), "");
}

HeadProblem CheckTe(const std::string& te, int version = 11) {
  CanonicalTarget target;
  std::string head = "PUT /objects/a HTTP/1." + std::to_string(version % 10) + "\r\nHost: x\r\n";
  for (size_t start = 0, end; start <= te.size(); start = end + 1) {
    // One Transfer-Encoding field per '|' in `te`.
    end = te.find('|', start);
    if (end == std::string::npos) end = te.size();
    head += "Transfer-Encoding: " + te.substr(start, end - start) + "\r\n";
  }
  return CheckHead(Parse(head + "\r\n"), &target);
}

TEST(RequestChecks, ChunkedAloneIsForwarded) {
  for (const char* te : {"chunked", "Chunked", "CHUNKED", " chunked ", ",chunked", "chunked ,",
                         "chunked, ,", "|chunked"}) {
    HeadProblem p = CheckTe(te);
    EXPECT_TRUE(p.ok()) << "[" << te << "]: " << p.message;
  }
}

// A well-formed list of transfer codings that ends in chunked but is not
// chunked alone: fencegate would forward the body de-chunked under its own
// "Transfer-Encoding: chunked", and the backend would take gzip bytes for
// the body. 501, and the connection closes (its body is not read).
TEST(RequestChecks, OtherTransferCodingsAre501) {
  for (const char* te : {"gzip, chunked", "deflate, chunked", "gzip,chunked", "gzip,,chunked",
                         "x-custom, chunked", "gzip|chunked", "gzip, deflate, chunked",
                         "chunked;ext=1", "gzip;level=\"9, x\", chunked"}) {
    HeadProblem p = CheckTe(te);
    EXPECT_EQ(p.status, http::status::not_implemented) << "[" << te << "]";
    EXPECT_EQ(p.code, "not_implemented") << "[" << te << "]";
    EXPECT_TRUE(p.close) << "[" << te << "]";
    EXPECT_NE(p.message.find("fencegate forwards only Transfer-Encoding: chunked"),
              std::string::npos)
        << p.message;
  }
  EXPECT_EQ(CheckTe("gzip, chunked").message,
            "fencegate forwards only Transfer-Encoding: chunked (this request's is gzip, chunked)");
}

// Framing whose body length cannot be determined, or that a backend may
// read another way: 400 (RFC 9112 6.1, 6.3), and the connection closes.
TEST(RequestChecks, AmbiguousTransferEncodingIs400) {
  for (const char* te : {"gzip", "identity", "chunked, gzip", "chunked, chunked",
                         "gzip, chunked, chunked", "", " ", ",", "chunked x", "chunked\tx",
                         "chunked;", "chunked;ext", "chunked;ext=", "chunked;=1",
                         "chunked;ext=\"open", "gzip chunked", "chunked/1", "\"chunked\""}) {
    HeadProblem p = CheckTe(te);
    EXPECT_EQ(p.status, http::status::bad_request) << "[" << te << "]";
    EXPECT_EQ(p.code, "bad_request") << "[" << te << "]";
    EXPECT_TRUE(p.close) << "[" << te << "]";
  }
  HeadProblem p = CheckTe("chunked", 10);
  EXPECT_EQ(p.status, http::status::bad_request);
  EXPECT_EQ(p.message, "Transfer-Encoding is not allowed in HTTP/1.0");
  // Beast's parser refuses this one itself; the check does not rely on it.
  http::request_header<> both;
  both.method(http::verb::put);
  both.target("/");
  both.set(http::field::host, "x");
  both.set(http::field::transfer_encoding, "gzip, chunked");
  both.set(http::field::content_length, "3");
  EXPECT_EQ(CheckRequestHead(both), "Transfer-Encoding and Content-Length together are ambiguous");
  EXPECT_EQ(CheckRequestHead(Parse("PUT / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, "
                                   "gzip\r\n\r\n")),
            "the last Transfer-Encoding must be chunked");
  EXPECT_EQ(CheckRequestHead(Parse("PUT / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked "
                                   "x\r\n\r\n")),
            "malformed Transfer-Encoding");
}

}  // namespace
}  // namespace fencegate::proxy
