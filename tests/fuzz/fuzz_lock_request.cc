// Fuzz target: the lock service's request decoding (docs/contract.md, "Lock
// service"), as LockSession runs it: a request_parser<string_body> with the
// session's limits, then DecodeLockRequest (URL shape, lock name, method,
// JSON body, ttl / wait / lease), and the reply for every answer the service
// could give for the decoded name (LockReply). Pipelined requests are read in
// turn while keep-alive holds.
//
// Invariants checked (a violation traps):
//  - every reply serializes and is a JSON object ("error" on refusals);
//  - a decoded name is 1..256 bytes without control bytes, and the name
//    percent-encoded back into a target decodes to itself;
//  - an acquire has 0 < ttl <= max_ttl and 0 <= wait <= max_ttl.

#include <boost/asio/buffer.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "locks/lock_request.h"
#include "tests/fuzz/fuzz_http.h"
#include "tests/fuzz/fuzz_util.h"

namespace fencegate::fuzz {
namespace {

namespace http = boost::beast::http;
using locks::Duration;
using locks::LockError;
using locks::LockOp;
using locks::LockResult;

constexpr Duration kMaxTtl{60000};        // locks.max_ttl: 1m
constexpr uint32_t kMaxHeaderBytes = 4096;  // limits.max_header_bytes, small for the fuzzer

void CheckReply(const proxy::Reply& reply, bool error) {
  std::ostringstream wire;
  wire << reply;
  auto body = nlohmann::json::parse(reply.body(), nullptr, /*allow_exceptions=*/false);
  FUZZ_CHECK(body.is_object());
  FUZZ_CHECK(body.contains("error") == error);
}

std::string PercentEncode(std::string_view name) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : name) {
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '.' || c == '_' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

void CheckCall(const locks::LockCall& call) {
  FUZZ_CHECK(!call.name.empty() && call.name.size() <= 256);
  for (unsigned char c : call.name) FUZZ_CHECK(c >= 0x20 && c != 0x7f);
  std::string name;
  LockOp op{};
  bool name_ok = false;
  FUZZ_CHECK(locks::ParseLockTarget("/v1/locks/" + PercentEncode(call.name) + "/renew", &name,
                                    &op, &name_ok));
  FUZZ_CHECK(name_ok && name == call.name && op == LockOp::kRenew);
  if (call.op == LockOp::kAcquire) {
    FUZZ_CHECK(call.ttl > Duration{0} && call.ttl <= kMaxTtl);
    FUZZ_CHECK(call.wait >= Duration{0} && call.wait <= kMaxTtl);
  }
  // Every answer the service can give, for this name.
  for (LockError e : {LockError::kNone, LockError::kHeld, LockError::kUnknownLease,
                      LockError::kLeaseExpired, LockError::kStore, LockError::kShuttingDown}) {
    LockResult r = LockResult::Ok(7, call.lease, Duration{1500});
    r.error = e;
    if (e == LockError::kStore) r.status = storage::Status::IoError("fuzz");
    CheckReply(locks::LockReply(call.name, call.op, r), e != LockError::kNone);
  }
}

}  // namespace
}  // namespace fencegate::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fencegate::fuzz;
  const std::string_view input = AsText(data, size);
  size_t offset = 0;
  for (int n = 0; n < 8 && offset < input.size(); ++n) {
    // LockSession::DoRead: a fresh parser, the session's limits, whole message.
    http::request_parser<http::string_body> parser;
    parser.header_limit(kMaxHeaderBytes);
    parser.body_limit(fencegate::locks::kMaxLockBodyBytes);
    boost::beast::error_code ec = ReadWholeRequest(parser, input, &offset);
    if (ec == http::error::need_more) return 0;  // EOF inside the message: the session closes
    if (ec) {
      CheckReply(fencegate::proxy::MakeError(http::status::bad_request, "bad_request",
                                             "malformed request: " + ec.message()),
                 true);
      return 0;
    }
    if (!parser.is_done()) return 0;
    fencegate::proxy::Reply refusal;
    std::optional<fencegate::locks::LockCall> call =
        fencegate::locks::DecodeLockRequest(parser.get(), kMaxTtl, &refusal);
    if (call) {
      CheckCall(*call);
    } else {
      CheckReply(refusal, true);
    }
    if (!parser.get().keep_alive()) return 0;
  }
  return 0;
}
