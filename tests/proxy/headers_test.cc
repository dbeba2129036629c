#include "proxy/headers.h"

#include <gtest/gtest.h>

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/write.hpp>
#include <sstream>
#include <string>

#include "config/config.h"
#include "fence/canonical_path.h"

namespace fencegate::proxy {
namespace {

namespace http = boost::beast::http;

TEST(Headers, HopByHopAndConnectionNamedFieldsAreDropped) {
  http::fields in;
  in.set(http::field::host, "example");
  in.set(http::field::connection, "keep-alive, X-Secret");
  in.set("X-Secret", "s");
  in.set(http::field::keep_alive, "timeout=5");
  in.set(http::field::te, "trailers");
  in.set(http::field::transfer_encoding, "chunked");
  in.set(http::field::content_length, "10");
  in.set(http::field::upgrade, "websocket");
  in.set(http::field::proxy_authorization, "Basic x");
  in.set(http::field::expect, "100-continue");
  in.set("Proxy-Connection", "keep-alive");
  in.set("X-Kept", "yes");
  in.set("Fencing-Token", "5");
  http::fields out;
  CopyEndToEndFields(in, out);
  EXPECT_EQ(out[http::field::host], "example");
  EXPECT_EQ(out["X-Kept"], "yes");
  EXPECT_EQ(out["Fencing-Token"], "5");
  for (auto name : {"Connection", "X-Secret", "Keep-Alive", "TE", "Transfer-Encoding",
                    "Content-Length", "Upgrade", "Proxy-Authorization", "Expect",
                    "Proxy-Connection"}) {
    EXPECT_EQ(out.find(name), out.end()) << name;
  }
}

TEST(Headers, SkipDropsTheTokenHeaderWhenNotForwarded) {
  http::fields in;
  in.set("fencing-token", "5");
  http::fields out;
  CopyEndToEndFields(in, out, "Fencing-Token");
  EXPECT_EQ(out.find("Fencing-Token"), out.end());
}

TEST(Headers, RepeatedFieldsKeepTheirOrder) {
  http::fields in;
  in.insert("X-A", "1");
  in.insert("X-A", "2");
  http::fields out;
  CopyEndToEndFields(in, out);
  auto range = out.equal_range("X-A");
  std::vector<std::string> values;
  for (auto it = range.first; it != range.second; ++it) values.emplace_back(it->value());
  EXPECT_EQ(values, (std::vector<std::string>{"1", "2"}));
}

TEST(Headers, ExpectContinue) {
  http::fields f;
  EXPECT_FALSE(ExpectsContinue(f));
  f.set(http::field::expect, "100-Continue");
  EXPECT_TRUE(ExpectsContinue(f));
}

TEST(Headers, ForwardingFieldsNameTheListenersScheme) {
  http::fields in;
  in.set("X-Forwarded-Proto", "http");  // forged by the client: dropped with trusted_hops 0
  http::fields out;
  SetForwardingFields(in, out, "10.0.0.9", 0, "https");
  EXPECT_EQ(out["X-Forwarded-Proto"], "https");
  EXPECT_EQ(out[http::field::forwarded], "for=10.0.0.9;proto=https");
  http::fields plain;
  SetForwardingFields(in, plain, "10.0.0.9", 0);
  EXPECT_EQ(plain["X-Forwarded-Proto"], "http");
  // A trusted proxy in front says how the client reached it.
  http::fields trusted;
  SetForwardingFields(in, trusted, "10.0.0.9", 1, "https");
  EXPECT_EQ(trusted["X-Forwarded-Proto"], "http");
}

template <class Header>
std::string BeastHead(const Header& h) {
  std::ostringstream out;
  out << h;  // Beast's fields writer, what its serializer sends
  return out.str();
}

TEST(AppendHead, RequestHeadsAreBeastsByteForByte) {
  UpstreamRequest req;
  req.method(http::verb::get);
  req.target("/objects/a%2Fb?x=1&y=%20");
  req.version(11);
  req.set(http::field::host, "backend:8080");
  req.set("X-Request-Id", "0123456789abcdef0123456789abcdef");
  req.insert("x-MiXeD-case", "v1");
  req.insert("x-MiXeD-case", "");  // repeated, and empty
  std::string own = "kept:";
  AppendHead(req.base(), &own);
  EXPECT_EQ(own, "kept:" + BeastHead(req.base()));
  EXPECT_EQ(own.rfind("kept:GET /objects/a%2Fb?x=1&y=%20 HTTP/1.1\r\nHost: backend:8080\r\n", 0),
            0u);

  req.method_string("PROPFIND");  // a method Beast has no verb for
  req.version(10);
  own.clear();
  AppendHead(req.base(), &own);
  EXPECT_EQ(own, BeastHead(req.base()));
  EXPECT_EQ(own.rfind("PROPFIND /objects/a%2Fb?x=1&y=%20 HTTP/1.0\r\n", 0), 0u);

  UpstreamRequest bare;  // no fields: start line and blank line
  bare.method(http::verb::delete_);
  bare.target("/");
  own.clear();
  AppendHead(bare.base(), &own);
  EXPECT_EQ(own, BeastHead(bare.base()));
  EXPECT_EQ(own, "DELETE / HTTP/1.1\r\n\r\n");
}

TEST(AppendHead, ResponseHeadsAreBeastsByteForByte) {
  DownstreamResponse res;
  res.result(http::status::not_found);
  res.version(11);
  res.set(http::field::content_length, "5");
  res.set("X-Request-Id", "abc");
  std::string own;
  AppendHead(res.base(), &own);
  EXPECT_EQ(own, BeastHead(res.base()));
  EXPECT_EQ(own.rfind("HTTP/1.1 404 Not Found\r\n", 0), 0u);

  res.reason("Gone Fishing");  // the backend's own reason phrase
  res.version(10);
  own.clear();
  AppendHead(res.base(), &own);
  EXPECT_EQ(own, BeastHead(res.base()));
  EXPECT_EQ(own.rfind("HTTP/1.0 404 Gone Fishing\r\n", 0), 0u);

  res.reason("");
  res.result(299);  // a status Beast has no name for: empty reason
  own.clear();
  AppendHead(res.base(), &own);
  EXPECT_EQ(own, BeastHead(res.base()));
}

// --- Heads appended straight from the parsed message (AppendUpstreamHead,
// AppendDownstreamHead) against the two-step path (a Beast message, then
// AppendHead), for a table of heads under several configurations.

constexpr std::string_view kRequestId = "0123456789abcdef0123456789abcdef";

void ParseRequest(std::string_view head, http::request_parser<http::buffer_body>& parser) {
  parser.header_limit(64 * 1024);
  parser.body_limit(boost::none);
  boost::beast::error_code ec;
  parser.put(boost::asio::buffer(head.data(), head.size()), ec);
  ASSERT_FALSE(ec) << ec.message() << " in " << head;
  ASSERT_TRUE(parser.is_header_done()) << head;
}

void ParseResponse(std::string_view head, bool head_request,
                   http::response_parser<http::buffer_body>& parser) {
  parser.header_limit(64 * 1024);
  if (head_request) parser.skip(true);  // as the session does for HEAD
  boost::beast::error_code ec;
  parser.put(boost::asio::buffer(head.data(), head.size()), ec);
  ASSERT_FALSE(ec) << ec.message() << " in " << head;
  ASSERT_TRUE(parser.is_header_done()) << head;
}

struct RequestConfig {
  const char* name;
  bool forward_token;
  unsigned trusted_hops;
  bool tls;
  const char* base_path;
};

config::Config MakeConfig(const RequestConfig& c) {
  config::Config config;
  config.upstream.host = "backend.internal";
  config.upstream.port = 8080;
  config.upstream.base_path = c.base_path;
  config.fencing.token_header = "X-Fencing-Token";
  config.fencing.forward_token = c.forward_token;
  config.forwarding.trusted_hops = c.trusted_hops;
  config.tls.enabled = c.tls;
  return config;
}

std::string TwoStepUpstreamHead(const http::request_parser<http::buffer_body>& parser,
                                const CanonicalTarget& target, const config::Config& config,
                                std::string_view client_ip) {
  UpstreamRequest up;
  BuildUpstreamRequest(parser, target, config, client_ip, kRequestId, &up);
  std::string head;
  AppendHead(up.base(), &head);
  EXPECT_EQ(head, BeastHead(up.base()));
  return head;
}

TEST(DirectHead, UpstreamRequestIsTheTwoStepHeadByteForByte) {
  const std::string_view heads[] = {
      // What wrk sends.
      "GET /objects/t0/k1 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n",
      // Connection naming other fields (one in another case), and every
      // hop-by-hop field.
      "GET /a HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, X-Secret, x-other\r\n"
      "X-Secret: s\r\nX-Kept: k\r\nX-OTHER: o\r\nKeep-Alive: timeout=5\r\nTE: trailers\r\n"
      "Upgrade: h2c\r\nProxy-Authorization: Basic x\r\nProxy-Connection: keep-alive\r\n\r\n",
      // Repeated fields, interleaved and in different cases: Beast keeps a
      // name's fields together.
      "GET /a HTTP/1.1\r\nX-A: 1\r\nHost: h\r\nx-a: 2\r\nCookie: c=1\r\nX-B: b\r\nX-A: 3\r\n"
      "cookie: c=2\r\n\r\n",
      // The token header (forwarded or not by the configuration), twice.
      "PUT /objects/k HTTP/1.1\r\nHost: h\r\nX-Fencing-Token: 7\r\nx-fencing-token: 8\r\n"
      "Fencing-Token: 9\r\nContent-Length: 5\r\n\r\n",
      // Forwarding fields and a request id from the client.
      "GET /a HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 1.1.1.1, 2.2.2.2\r\n"
      "X-Forwarded-For: 3.3.3.3\r\nX-Forwarded-Proto: https\r\n"
      "Forwarded: for=1.1.1.1, for=\"[2001:db8::1]\";proto=https\r\nX-Request-Id: client-id\r\n"
      "\r\n",
      "GET /a HTTP/1.1\r\nHost: h\r\nx-forwarded-for: ,, 9.9.9.9 ,\r\n\r\n",
      // No Host (HTTP/1.0), a query.
      "GET /a?x=1&y=%20 HTTP/1.0\r\n\r\n",
      // HTTP/1.0 with and without keep-alive.
      "GET /a HTTP/1.0\r\nConnection: keep-alive\r\nHost: h\r\n\r\n",
      "GET /a HTTP/1.0\r\nHost: h\r\nUser-Agent: ab\r\n\r\n",
      // Content-Length (zero and not).
      "POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\nContent-Type: text/plain\r\n\r\n",
      "PUT /a HTTP/1.1\r\nContent-Length: 12345678901\r\nHost: h\r\n\r\n",
      // Chunked, with Expect and Trailer.
      "PUT /a HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n"
      "Trailer: X-T\r\n\r\n",
      // HEAD, a lower-case Host.
      "HEAD /a HTTP/1.1\r\nhost: lower\r\n\r\n",
      // Methods Beast has no verb for.
      "PROPFIND /a HTTP/1.1\r\nHost: h\r\nDepth: 1\r\n\r\n",
      "get /a HTTP/1.1\r\nHost: h\r\n\r\n",
      // Connection naming Host: the default Host is added.
      "GET /a HTTP/1.1\r\nHost: h\r\nConnection: host\r\n\r\n",
      // Empty values and values with inner white space.
      "GET /a HTTP/1.1\r\nHost: h\r\nX-Empty:\r\nX-Tab: \tv  w\t\r\n\r\n",
  };
  const RequestConfig configs[] = {
      {"defaults", true, 0, false, ""},
      {"token dropped, 2 trusted hops, TLS, base path", false, 2, true, "/api"},
      {"token forwarded, 2 trusted hops", true, 2, false, ""},
  };
  // IPv4, IPv6, and none (the peer's address was not known).
  const std::string_view client_ips[] = {"10.0.0.7", "2001:db8::7", ""};
  int compared = 0;
  for (std::string_view head : heads) {
    for (const RequestConfig& c : configs) {
      const config::Config config = MakeConfig(c);
      for (std::string_view client_ip : client_ips) {
        http::request_parser<http::buffer_body> parser;
        ASSERT_NO_FATAL_FAILURE(ParseRequest(head, parser));
        CanonicalTarget target;
        ASSERT_EQ(CanonicalizeTarget(parser.get().target(), &target), PathError::kNone) << head;
        std::string direct = "kept:";  // appended, not replaced
        AppendUpstreamHead(parser, target, config, client_ip, kRequestId, &direct);
        EXPECT_EQ(direct, "kept:" + TwoStepUpstreamHead(parser, target, config, client_ip))
            << "config: " << c.name << ", client: [" << client_ip << "], head:\n"
            << head;
        ++compared;
      }
    }
  }
  EXPECT_EQ(compared, 17 * 3 * 3);
}

TEST(DirectHead, UpstreamRequestOfWrk) {
  // The bytes themselves, for the commonest head: the order the two paths
  // share is pinned here, not only their agreement.
  http::request_parser<http::buffer_body> parser;
  ASSERT_NO_FATAL_FAILURE(
      ParseRequest("GET /objects/t0/k1 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n", parser));
  CanonicalTarget target;
  ASSERT_EQ(CanonicalizeTarget(parser.get().target(), &target), PathError::kNone);
  const config::Config config = MakeConfig({"defaults", true, 0, false, ""});
  std::string direct;
  AppendUpstreamHead(parser, target, config, "127.0.0.1", kRequestId, &direct);
  EXPECT_EQ(direct,
            "GET /objects/t0/k1 HTTP/1.1\r\n"
            "Host: 127.0.0.1:8080\r\n"
            "X-Forwarded-For: 127.0.0.1\r\n"
            "X-Forwarded-Proto: http\r\n"
            "Forwarded: for=127.0.0.1;proto=http\r\n"
            "X-Request-Id: 0123456789abcdef0123456789abcdef\r\n"
            "\r\n");
}

// A COPY or MOVE goes upstream with the canonical path and the canonical
// Destination, both under the upstream base path, in either builder.
TEST(DirectHead, CopyGoesUpWithTheCanonicalDestination) {
  http::request_parser<http::buffer_body> parser;
  ASSERT_NO_FATAL_FAILURE(ParseRequest(
      "COPY /objects//rep%3a1/ HTTP/1.1\r\nHost: h\r\n"
      "Destination: http://h/objects/./b%40c\r\nOverwrite: T\r\n\r\n",
      parser));
  CanonicalTarget target;
  ASSERT_EQ(CanonicalizeTarget(parser.get().target(), &target), PathError::kNone);
  CanonicalDestination dest;
  ASSERT_EQ(CanonicalizeDestination("http://h/objects/./b%40c", &dest), PathError::kNone);
  config::Config config = MakeConfig({"defaults", true, 0, false, ""});
  config.upstream.base_path = "/dav";
  std::string direct;
  AppendUpstreamHead(parser, target, config, "127.0.0.1", kRequestId, &direct, &dest);
  EXPECT_EQ(direct.substr(0, direct.find("\r\n")), "COPY /dav/objects/rep:1/ HTTP/1.1");
  EXPECT_NE(direct.find("\r\nDestination: http://h/dav/objects/b@c\r\n"), std::string::npos)
      << direct;
  EXPECT_EQ(direct.find("%40"), std::string::npos) << direct;
  EXPECT_NE(direct.find("\r\nOverwrite: T\r\n"), std::string::npos) << direct;
  UpstreamRequest up;
  BuildUpstreamRequest(parser, target, config, "127.0.0.1", kRequestId, &up, &dest);
  std::string built;
  AppendHead(up.base(), &built);
  EXPECT_EQ(built, direct);
}

// A request without Host (HTTP/1.0) gets the upstream's: an IPv6 literal in
// brackets (RFC 9110 section 7.2, RFC 3986 section 3.2.2), else
// "[::1]:8080" would read as a host "::1:8080" without a port.
TEST(DirectHead, DefaultHostOfAnIpv6UpstreamIsBracketed) {
  for (const auto& [host, want] : {std::pair{"::1", "Host: [::1]:8080\r\n"},
                                   std::pair{"backend.internal", "Host: backend.internal:8080\r\n"},
                                   std::pair{"10.0.0.1", "Host: 10.0.0.1:8080\r\n"}}) {
    http::request_parser<http::buffer_body> parser;
    ASSERT_NO_FATAL_FAILURE(ParseRequest("GET /a HTTP/1.0\r\n\r\n", parser));
    CanonicalTarget target;
    ASSERT_EQ(CanonicalizeTarget(parser.get().target(), &target), PathError::kNone);
    config::Config config = MakeConfig({"defaults", true, 0, false, ""});
    config.upstream.host = host;
    std::string direct;
    AppendUpstreamHead(parser, target, config, "127.0.0.1", kRequestId, &direct);
    EXPECT_NE(direct.find(want), std::string::npos) << direct;
    EXPECT_EQ(direct, TwoStepUpstreamHead(parser, target, config, "127.0.0.1"));
  }
}

constexpr std::string_view kNginxHead =
    "HTTP/1.1 200 OK\r\nServer: nginx/1.22.1\r\nDate: Mon, 30 Nov 2026 02:00:00 GMT\r\n"
    "Content-Type: application/octet-stream\r\nContent-Length: 615\r\n"
    "Last-Modified: Tue, 13 Jun 2023 15:08:10 GMT\r\nConnection: keep-alive\r\n"
    "ETag: \"64888a1a-267\"\r\nAccept-Ranges: bytes\r\n\r\n";

TEST(DirectHead, DownstreamResponseIsTheTwoStepHeadByteForByte) {
  const std::string_view heads[] = {
      kNginxHead,
      // Chunked upstream, Connection naming a field, Keep-Alive, Trailer.
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive, X-Hop\r\n"
      "X-Hop: h\r\nKeep-Alive: timeout=5\r\nTrailer: X-T\r\nX-Kept: k\r\n\r\n",
      // Delimited by EOF, from an HTTP/1.0 backend.
      "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n",
      // Bodiless statuses, one with a Content-Length that is copied as is.
      "HTTP/1.1 204 No Content\r\nX-A: 1\r\n\r\n",
      "HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\nContent-Length: 42\r\n\r\n",
      // Repeated fields interleaved, the backend's own reason phrase.
      "HTTP/1.1 404 Gone Fishing\r\nSet-Cookie: a=1\r\nX-B: b\r\nset-cookie: b=2\r\n"
      "Content-Length: 0\r\n\r\n",
      // The backend's request id and forwarding fields: dropped, ours set.
      "HTTP/1.1 201 Created\r\nX-Request-Id: backend\r\nX-Forwarded-For: 1.2.3.4\r\n"
      "Content-Length: 2\r\n\r\n",
      // A status Beast has no name for, without a reason phrase.
      "HTTP/1.1 299 \r\nContent-Length: 1\r\n\r\n",
      // The backend closes.
      "HTTP/1.1 500 Internal Server Error\r\nConnection: close\r\nContent-Length: 3\r\n\r\n",
  };
  int compared = 0;
  for (std::string_view head : heads) {
    for (bool head_request : {false, true}) {
      for (bool client_http11 : {true, false}) {
        for (bool keep_alive : {true, false}) {
          http::response_parser<http::buffer_body> parser;
          ASSERT_NO_FATAL_FAILURE(ParseResponse(head, head_request, parser));
          DownstreamResponse down;
          DownstreamFraming built =
              BuildDownstreamResponse(parser, head_request, client_http11, keep_alive, &down);
          down.set("X-Request-Id", kRequestId);  // as the session does
          std::string two_step;
          AppendHead(down.base(), &two_step);
          EXPECT_EQ(two_step, BeastHead(down.base()));

          std::string direct = "kept:";
          DownstreamFraming framing = AppendDownstreamHead(parser, head_request, client_http11,
                                                           keep_alive, kRequestId, &direct);
          const std::string where = std::string("HEAD request: ") + (head_request ? "yes" : "no") +
                                    ", HTTP/1.1 client: " + (client_http11 ? "yes" : "no") +
                                    ", keep-alive wanted: " + (keep_alive ? "yes" : "no") +
                                    ", head:\n" + std::string(head);
          EXPECT_EQ(direct, "kept:" + two_step) << where;
          EXPECT_EQ(framing.keep_alive, built.keep_alive) << where;
          EXPECT_EQ(framing.close_delimited, built.close_delimited) << where;
          EXPECT_EQ(framing.chunked, built.chunked) << where;
          EXPECT_EQ(built.chunked, down.chunked()) << where;
          DownstreamFraming decided =
              DecideDownstreamFraming(parser, head_request, client_http11, keep_alive);
          EXPECT_EQ(decided.keep_alive, built.keep_alive) << where;
          EXPECT_EQ(decided.close_delimited, built.close_delimited) << where;
          EXPECT_EQ(decided.chunked, built.chunked) << where;
          ++compared;
        }
      }
    }
  }
  EXPECT_EQ(compared, 9 * 8);
}

TEST(DirectHead, DownstreamResponseOfNginx) {
  http::response_parser<http::buffer_body> parser;
  ASSERT_NO_FATAL_FAILURE(ParseResponse(kNginxHead, false, parser));
  std::string direct;
  DownstreamFraming framing = AppendDownstreamHead(parser, /*head_request=*/false,
                                                   /*client_http11=*/false, /*keep_alive=*/true,
                                                   "rid", &direct);
  EXPECT_TRUE(framing.keep_alive);
  EXPECT_EQ(direct,
            "HTTP/1.0 200 OK\r\n"
            "Server: nginx/1.22.1\r\n"
            "Date: Mon, 30 Nov 2026 02:00:00 GMT\r\n"
            "Content-Type: application/octet-stream\r\n"
            "Last-Modified: Tue, 13 Jun 2023 15:08:10 GMT\r\n"
            "ETag: \"64888a1a-267\"\r\n"
            "Accept-Ranges: bytes\r\n"
            "Content-Length: 615\r\n"
            "Connection: keep-alive\r\n"
            "X-Request-Id: rid\r\n"
            "\r\n");
}

// A generated id replaces whatever the string held (a session reuses its
// string request after request): 32 lowercase hex digits, a new one each
// time, and an id a client could have sent.
TEST(RequestId, GeneratedIdsAreNewHexOfLength32) {
  std::string id = "a client's id that was longer than thirty-two bytes";
  NewRequestId(&id);
  const std::string first = id;
  NewRequestId(&id);
  for (const std::string& v : {first, id}) {
    ASSERT_EQ(v.size(), 32u) << v;
    for (char c : v) EXPECT_TRUE((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) << v;
    EXPECT_TRUE(IsValidRequestId(v));
  }
  EXPECT_NE(first, id);
}

}  // namespace
}  // namespace fencegate::proxy
