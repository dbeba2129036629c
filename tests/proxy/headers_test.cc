#include "proxy/headers.h"

#include <gtest/gtest.h>

#include <boost/beast/http/write.hpp>
#include <sstream>
#include <string>

#include "proxy/admin_request.h"

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

TEST(AdminTargets, KeyIsOnePercentEncodedSegment) {
  std::string key;
  bool fence = true;
  ASSERT_TRUE(ParseAdminKeyTarget("/v1/keys/%2Fobjects%2Fa", &key, &fence));
  EXPECT_EQ(key, "/objects/a");
  EXPECT_FALSE(fence);
  ASSERT_TRUE(ParseAdminKeyTarget("/v1/keys/%2Fobjects%2Fa/fence", &key, &fence));
  EXPECT_EQ(key, "/objects/a");
  EXPECT_TRUE(fence);
  EXPECT_FALSE(ParseAdminKeyTarget("/v1/keys/objects/a", &key, &fence));
  EXPECT_FALSE(ParseAdminKeyTarget("/v1/keys/", &key, &fence));
  EXPECT_FALSE(ParseAdminKeyTarget("/v1/keys/%zz", &key, &fence));
  EXPECT_FALSE(ParseAdminKeyTarget("/v1/other/x", &key, &fence));
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

TEST(AdminAuth, ConstantTimeEquals) {
  EXPECT_TRUE(ConstantTimeEquals("secret", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("secret", "secreT"));
  EXPECT_FALSE(ConstantTimeEquals("secret", "secret2"));
  EXPECT_FALSE(ConstantTimeEquals("", "x"));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
}

TEST(AdminAuth, BearerMatches) {
  EXPECT_TRUE(BearerMatches("Bearer s3cret", "s3cret"));
  EXPECT_TRUE(BearerMatches("bEARER s3cret", "s3cret"));  // the scheme is case-insensitive
  EXPECT_FALSE(BearerMatches("Bearer S3cret", "s3cret"));  // the credential is not
  EXPECT_FALSE(BearerMatches("Bearer s3cret ", "s3cret"));
  EXPECT_FALSE(BearerMatches("Basic s3cret", "s3cret"));
  EXPECT_FALSE(BearerMatches("Bearer ", ""));  // an empty admin token never matches
  EXPECT_FALSE(BearerMatches("", ""));
}

TEST(AdminFenceBody, TokenAsNumberOrDecimalString) {
  EXPECT_EQ(ParseFenceBody(R"({"token": 42})"), 42u);
  EXPECT_EQ(ParseFenceBody(R"({"token": "18446744073709551615"})"), UINT64_MAX);
  EXPECT_EQ(ParseFenceBody(R"({"token": 0, "other": [1]})"), 0u);
  EXPECT_EQ(ParseFenceBody(R"({"token": -1})"), std::nullopt);
  EXPECT_EQ(ParseFenceBody(R"({"token": 1.5})"), std::nullopt);
  EXPECT_EQ(ParseFenceBody(R"({"token": "18446744073709551616"})"), std::nullopt);
  EXPECT_EQ(ParseFenceBody(R"({"token": "4 2"})"), std::nullopt);
  EXPECT_EQ(ParseFenceBody(R"({"token": null})"), std::nullopt);
  EXPECT_EQ(ParseFenceBody(R"([42])"), std::nullopt);
  EXPECT_EQ(ParseFenceBody("{\"token\": 4"), std::nullopt);
  EXPECT_EQ(ParseFenceBody(""), std::nullopt);
}

}  // namespace
}  // namespace fencegate::proxy
