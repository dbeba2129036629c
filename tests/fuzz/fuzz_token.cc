// Fuzz target: fencing token parsing (docs/contract.md, "Tokens").
//
// Input: the whole input is one header value for ParseTokenValue; its lines
// are also the values of up to four Fencing-Token fields, given directly to
// ParseTokenHeaders and, written as a request head, through Beast's parser
// and Classify (the way a token reaches the fence on the request path).
//
// Invariants checked (a violation traps):
//  - ParseTokenValue accepts exactly 1..20 ASCII digits whose value fits in
//    64 bits (checked against a 128-bit reference), with that value;
//  - a parsed token printed back re-parses to the same value, and equals
//    the input without its leading zeros;
//  - no header: missing; two or more: malformed; one: as ParseTokenValue;
//  - Classify fences a write only when the request carries exactly one
//    token field, with the value ParseTokenValue gives for it; the 400 and
//    409 replies it leads to are JSON.

#include <boost/asio/buffer.hpp>
#include <boost/beast/http.hpp>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fence/classify.h"
#include "fence/router.h"
#include "fence/token.h"
#include "net/replies.h"
#include "tests/fuzz/fuzz_util.h"

namespace fencegate::fuzz {
namespace {

namespace http = boost::beast::http;
using proxy::TokenParse;
using proxy::TokenStatus;

void CheckValue(std::string_view v) {
  const TokenParse p = proxy::ParseTokenValue(v);
  FUZZ_CHECK(p.status != TokenStatus::kMissing);

  // Reference: digits only, 1..20 of them, at most 2^64-1.
  bool digits = !v.empty() && v.size() <= 20;
  unsigned __int128 value = 0;
  for (char c : v) {
    if (c < '0' || c > '9') {
      digits = false;
      break;
    }
    if (digits) value = value * 10 + static_cast<unsigned>(c - '0');
  }
  const bool fits = digits && value <= UINT64_MAX;
  FUZZ_CHECK((p.status == TokenStatus::kOk) == fits);
  if (p.status != TokenStatus::kOk) {
    FUZZ_CHECK(p.reason != nullptr && p.reason[0] != '\0');
    return;
  }
  FUZZ_CHECK(p.value == static_cast<uint64_t>(value));

  // Printed back, it re-parses to itself and is the input minus leading zeros.
  const std::string printed = std::to_string(p.value);
  const TokenParse again = proxy::ParseTokenValue(printed);
  FUZZ_CHECK(again.status == TokenStatus::kOk && again.value == p.value);
  std::string_view stripped = v.substr(std::min(v.find_first_not_of('0'), v.size() - 1));
  FUZZ_CHECK(stripped == printed);
}

void CheckHeaders(const std::vector<std::string_view>& values) {
  const TokenParse p = proxy::ParseTokenHeaders(values);
  if (values.empty()) {
    FUZZ_CHECK(p.status == TokenStatus::kMissing);
  } else if (values.size() > 1) {
    FUZZ_CHECK(p.status == TokenStatus::kMalformed);
  } else {
    const TokenParse one = proxy::ParseTokenValue(values[0]);
    FUZZ_CHECK(p.status == one.status && p.value == one.value);
  }
}

const proxy::Router& ObjectsRouter() {
  static const std::unique_ptr<proxy::Router> router = [] {
    config::RouteConfig rc;
    rc.name = "objects";
    rc.path_prefix = "/objects/";
    std::string error;
    auto r = proxy::Router::Build({rc}, &error);
    FUZZ_CHECK(r != nullptr);
    return r;
  }();
  return *router;
}

void CheckReply(const proxy::Reply& reply, std::string_view code) {
  auto body = nlohmann::json::parse(reply.body(), nullptr, /*allow_exceptions=*/false);
  FUZZ_CHECK(body.is_object() && body.value("error", "") == code);
}

// The values as Fencing-Token fields of a request head, through Beast.
void CheckRequest(const std::vector<std::string_view>& values) {
  std::string head = "PUT /objects/t HTTP/1.1\r\nHost: x\r\n";
  for (std::string_view v : values) head.append("Fencing-Token: ").append(v).append("\r\n");
  head.append("\r\n");
  http::request_parser<http::empty_body> parser;
  boost::beast::error_code ec;
  parser.put(boost::asio::buffer(head), ec);
  if (ec || !parser.is_header_done()) return;  // Beast refuses the head: 400 before any token
  const auto& req = parser.get();

  std::vector<std::string_view> fields;
  auto range = req.equal_range("Fencing-Token");
  for (auto it = range.first; it != range.second; ++it) fields.push_back(it->value());

  proxy::WriteIntent intent =
      proxy::Classify(proxy::FenceSettings{}, ObjectsRouter(), "PUT", "/objects/t", req.base());
  switch (intent.kind) {
    case proxy::WriteIntent::Kind::kFence: {
      FUZZ_CHECK(fields.size() == 1);
      const TokenParse p = proxy::ParseTokenValue(fields[0]);
      FUZZ_CHECK(p.status == TokenStatus::kOk && p.value == intent.token);
      FUZZ_CHECK(intent.key == "/objects/t");
      CheckReply(proxy::MakeStale(intent.key, intent.token, intent.token + 1), "stale_token");
      break;
    }
    case proxy::WriteIntent::Kind::kReject:
      FUZZ_CHECK(intent.reply.has_value());
      CheckReply(*intent.reply, fields.empty() ? "token_required" : "bad_token");
      break;
    case proxy::WriteIntent::Kind::kPassThrough:
      FUZZ_CHECK(false);  // an enforce route never passes a PUT through
  }
}

}  // namespace
}  // namespace fencegate::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fencegate::fuzz;
  std::string_view text = AsText(data, size);
  CheckValue(text);

  std::vector<std::string_view> values;
  std::string_view rest = text;
  while (!rest.empty() && values.size() < 4) values.push_back(NextLine(&rest));
  for (std::string_view v : values) CheckValue(v);
  CheckHeaders(values);
  CheckRequest(values);
  return 0;
}
