// Fuzz target: the admin listener's request decoding (docs/contract.md,
// "Admin API"), as AdminSession runs it: a request_parser<string_body> with
// the admin limits, then the key in the target (ParseAdminKeyTarget), the
// bearer check (BearerMatches) and the fence body (ParseFenceBody), and the
// JSON replies those answers produce. Pipelined requests are read in turn
// while keep-alive holds.
//
// Invariants checked (a violation traps):
//  - a decoded key is non-empty, and percent-encoded back into a target it
//    decodes to itself with the same fence flag;
//  - BearerMatches agrees with a plain comparison against the configured
//    admin token, and ConstantTimeEquals with operator==;
//  - a fence token round-trips through the reply's JSON; an accepted fence
//    body is an object whose only member is "token", a number (read as
//    nlohmann reads it when it is a plain integer); a refused one says why;
//  - CheckAdminKey refuses exactly the keys longer than kMaxKeyBytes;
//  - every reply serializes and is a JSON object.

#include <boost/asio/buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "admin/admin_request.h"
#include "fence/router.h"
#include "net/replies.h"
#include "tests/fuzz/fuzz_http.h"
#include "tests/fuzz/fuzz_util.h"

namespace fencegate::fuzz {
namespace {

namespace http = boost::beast::http;

constexpr uint32_t kMaxHeaderBytes = 4096;     // limits.max_header_bytes, small for the fuzzer
constexpr uint64_t kMaxAdminBody = uint64_t{64} * 1024;  // as AdminSession
constexpr std::string_view kAdminToken = "s3cret-admin-token";

void CheckReply(const proxy::Reply& reply) {
  std::ostringstream wire;
  wire << reply;
  auto body = nlohmann::json::parse(reply.body(), nullptr, /*allow_exceptions=*/false);
  FUZZ_CHECK(body.is_object());
}

std::string PercentEncodeAll(std::string_view key) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : key) {
    out.push_back('%');
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

void CheckRequest(const http::request<http::string_body>& req) {
  std::string key;
  bool fence = false;
  if (proxy::ParseAdminKeyTarget(req.target(), &key, &fence)) {
    FUZZ_CHECK(!key.empty());
    std::string again;
    bool fence_again = !fence;
    std::string target = "/v1/keys/" + PercentEncodeAll(key) + (fence ? "/fence" : "");
    FUZZ_CHECK(proxy::ParseAdminKeyTarget(target, &again, &fence_again));
    FUZZ_CHECK(again == key && fence_again == fence);
    CheckReply(proxy::MakeJson(http::status::ok, {{"key", key}, {"token", 1}}));
  } else {
    CheckReply(proxy::MakeError(http::status::not_found, "not_found",
                                "no admin endpoint " + std::string(req.target())));
  }

  auto auth = req.find(http::field::authorization);
  std::string_view value = auth == req.end() ? std::string_view{} : std::string_view(auth->value());
  bool expected = value.size() > 7 && boost::beast::iequals(value.substr(0, 7), "Bearer ") &&
                  value.substr(7) == kAdminToken;
  FUZZ_CHECK(proxy::BearerMatches(value, kAdminToken) == expected);
  FUZZ_CHECK(!proxy::BearerMatches(value, ""));
  std::string_view body = req.body();
  std::string_view half = body.substr(0, body.size() / 2);
  FUZZ_CHECK(proxy::ConstantTimeEquals(half, body.substr(half.size())) ==
             (half == body.substr(half.size())));

  proxy::FenceBody fence_body = proxy::ParseFenceBody(body);
  if (fence_body.token) {
    proxy::Reply reply =
        proxy::MakeJson(http::status::ok, {{"key", key}, {"token", *fence_body.token}});
    auto parsed = nlohmann::json::parse(reply.body());
    FUZZ_CHECK(parsed.at("token").get<uint64_t>() == *fence_body.token);
    // An accepted body is an object with "token" and nothing else, and a
    // token written as a plain integer is read as nlohmann reads it.
    auto doc = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
    FUZZ_CHECK(doc.is_object() && doc.size() == 1 && doc.contains("token"));
    FUZZ_CHECK(doc["token"].is_number());
    if (doc["token"].is_number_unsigned()) {
      FUZZ_CHECK(doc["token"].get<uint64_t>() == *fence_body.token);
    }
  } else {
    FUZZ_CHECK(fence_body.code == "bad_token" || fence_body.code == "bad_request");
    FUZZ_CHECK(!fence_body.message.empty());
    CheckReply(proxy::MakeError(http::status::bad_request, fence_body.code, fence_body.message));
  }
  FUZZ_CHECK(proxy::CheckAdminKey(key).empty() == (key.size() <= proxy::kMaxKeyBytes));
}

}  // namespace
}  // namespace fencegate::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fencegate::fuzz;
  const std::string_view input = AsText(data, size);
  size_t offset = 0;
  for (int n = 0; n < 8 && offset < input.size(); ++n) {
    // AdminSession::DoRead: a fresh parser, the session's limits, whole message.
    http::request_parser<http::string_body> parser;
    parser.header_limit(kMaxHeaderBytes);
    parser.body_limit(kMaxAdminBody);
    boost::beast::error_code ec = ReadWholeRequest(parser, input, &offset);
    if (ec == http::error::need_more) return 0;  // EOF inside the message: the session closes
    if (ec) {
      CheckReply(fencegate::proxy::MakeError(http::status::bad_request, "bad_request",
                                             "malformed admin request: " + ec.message()));
      return 0;
    }
    if (!parser.is_done()) return 0;
    CheckRequest(parser.get());
    if (!parser.get().keep_alive()) return 0;
  }
  return 0;
}
