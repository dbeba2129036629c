// Fuzz target: a client's byte stream through the data plane's parsing and
// decisions, as HttpSession runs them, without sockets.
//
// The input is what a client sends on one connection. For each request in
// it (pipelining included) this target does what the session does: a fresh
// request_parser<buffer_body> with the configured header and body limits,
// the head checks (CheckHead: framing, absolute-form, canonical path), the
// route and fence decision (Classify), fencegate's own replies, the head
// sent upstream (BuildUpstreamRequest), the body read in 64 KiB steps or
// discarded after a refusal, then the next request while keep-alive holds.
// Every input runs under two configurations (see kConfigs).
//
// Invariants checked (a violation traps):
//  - every reply fencegate makes is JSON with an "error" code;
//  - a fenced key is 1..1024 bytes without control bytes;
//  - the head forwarded upstream parses back completely; carries the same
//    method, the canonical target under the base path (canonical again),
//    fencegate's framing only (the client's length, or chunked, never
//    both), one Host, no hop-by-hop field, the token header only when
//    forwarded; and CheckRequestHead finds nothing ambiguous in it;
//  - the head appended straight from the parser (AppendUpstreamHead, what
//    the session sends for a request without a body) is byte for byte the
//    two-step one, AppendHead over BuildUpstreamRequest's message.

#include <boost/asio/buffer.hpp>
#include <boost/beast/http.hpp>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include "config/config.h"
#include "fence/canonical_path.h"
#include "fence/classify.h"
#include "fence/request_checks.h"
#include "fence/router.h"
#include "net/replies.h"
#include "proxy/headers.h"
#include "tests/fuzz/fuzz_util.h"

namespace fencegate::fuzz {
namespace {

namespace http = boost::beast::http;
using proxy::Reply;

// Small limits, so that inputs of a few KiB reach the 431 and 413 paths.
constexpr const char* kConfigs[] = {
    R"yaml(upstream:
  url: "http://127.0.0.1:9000"
routes:
  - name: health
    path_prefix: "/documents/_health"
    mode: off
  - name: objects
    path_prefix: "/objects/"
  - name: tenants
    path_regex: "^/tenants/([^/]+)/"
    key: "tenant/{1}"
  - name: documents
    path_prefix: "/documents/"
    methods: [PUT, DELETE]
    key: "{header:X-Tenant}:{path}"
  - name: shadow
    path_prefix: "/shadow/"
    mode: shadow
    key: "{header:X-Tenant}{path}"
limits:
  max_header_bytes: 4096
  max_body_bytes: 2048
)yaml",
    R"yaml(upstream:
  url: "http://backend.internal:8080/api/"
fencing:
  token_header: "X-Fencing-Token"
  forward_token: false
routes:
  - name: all
    path_regex: "^/(a|b)+/([^/]*)"
    methods: [PUT, POST, PATCH, DELETE, GET, HEAD]
    key: "{2}@{header:X-User}"
forwarding:
  trusted_hops: 2
limits:
  max_header_bytes: 1024
  max_body_bytes: 64
)yaml",
};

struct Setup {
  config::Config config;
  std::unique_ptr<proxy::Router> router;
  proxy::FenceSettings settings;
  std::string client_ip;
};

const std::vector<Setup>& Setups() {
  static const std::vector<Setup> setups = [] {
    std::vector<Setup> out;
    for (const char* yaml : kConfigs) {
      config::LoadResult loaded = config::LoadFromString(yaml, "fuzz_request.yaml");
      FUZZ_CHECK(std::holds_alternative<config::Config>(loaded));
      Setup s;
      s.config = std::get<config::Config>(std::move(loaded));
      std::string error;
      s.router = proxy::Router::Build(s.config.routes, &error);
      FUZZ_CHECK(s.router != nullptr);
      s.settings.token_header = s.config.fencing.token_header;
      s.client_ip = out.empty() ? "127.0.0.1" : "::1";
      out.push_back(std::move(s));
    }
    return out;
  }();
  return setups;
}

size_t Count(const http::fields& f, std::string_view name) {
  auto range = f.equal_range(name);
  return static_cast<size_t>(std::distance(range.first, range.second));
}

// A reply fencegate makes itself must serialize and carry a JSON error.
void CheckReply(const Reply& reply) {
  std::ostringstream wire;
  wire << reply;
  auto body = nlohmann::json::parse(reply.body(), nullptr, /*allow_exceptions=*/false);
  FUZZ_CHECK(body.is_object());
  FUZZ_CHECK(body.contains("error") && body["error"].is_string());
  FUZZ_CHECK(reply[http::field::content_type] == "application/json");
}

void CheckKey(const std::string& key) {
  FUZZ_CHECK(!key.empty() && key.size() <= proxy::kMaxKeyBytes);
  for (unsigned char c : key) FUZZ_CHECK(c >= 0x20 && c != 0x7f);
}

// A fenced write has a key, or is a subtree write outside every route that
// the tree of paths decides, with no key at all.
void CheckFenced(const proxy::WriteIntent& intent) {
  for (const storage::TreeTarget& t : intent.targets) {
    FUZZ_CHECK(t.path.starts_with('/') && storage::TreeDepth(t.path) <= storage::kMaxTreeDepth);
    FUZZ_CHECK((t.nesting == storage::Nesting::kUncovered) == t.key.empty());
  }
  if (!intent.key.empty()) return CheckKey(intent.key);
  FUZZ_CHECK(!intent.targets.empty() && intent.extra_keys.empty());
  for (const storage::TreeTarget& t : intent.targets) {
    FUZZ_CHECK(t.nesting == storage::Nesting::kUncovered && t.subtree);
  }
}

// The head that goes upstream, parsed back as the backend would parse it.
void CheckUpstream(const Setup& s, const http::request_parser<http::buffer_body>& client,
                   const proxy::CanonicalTarget& target, std::string_view request_id,
                   const proxy::UpstreamRequest& up) {
  std::ostringstream wire;
  wire << up.base();
  const std::string head = wire.str();
  // The session writes a head without a body itself, and must write these
  // very bytes: AppendHead over the message, and the head appended straight
  // from the parser without one.
  std::string own;
  proxy::AppendHead(up.base(), &own);
  FUZZ_CHECK(own == head);
  std::string direct;
  proxy::AppendUpstreamHead(client, target, s.config, s.client_ip, request_id, &direct);
  FUZZ_CHECK(direct == own);

  http::request_parser<http::buffer_body> back;
  back.header_limit(1u << 20);
  back.body_limit(boost::none);
  boost::beast::error_code ec;
  size_t used = back.put(boost::asio::buffer(head), ec);
  FUZZ_CHECK(!ec);
  FUZZ_CHECK(back.is_header_done() && used == head.size());

  const auto& req = client.get();
  const auto& got = back.get();
  FUZZ_CHECK(got.method_string() == req.method_string());
  FUZZ_CHECK(got.version() == 11);

  // What was fenced is exactly what the backend receives.
  std::string want = s.config.upstream.base_path + target.forward;
  if (target.has_query) want.append("?").append(target.query);
  FUZZ_CHECK(got.target() == want);
  std::string_view forwarded_path = got.target();
  forwarded_path.remove_prefix(s.config.upstream.base_path.size());
  proxy::CanonicalTarget again;
  FUZZ_CHECK(proxy::CanonicalizeTarget(forwarded_path, &again) == proxy::PathError::kNone);
  FUZZ_CHECK(again.path == target.path && again.query == target.query);

  // fencegate's own framing, one way only.
  FUZZ_CHECK(Count(got, "Content-Length") <= 1 && Count(got, "Transfer-Encoding") <= 1);
  if (client.content_length()) {
    FUZZ_CHECK(back.content_length() && *back.content_length() == *client.content_length());
    FUZZ_CHECK(!back.chunked());
  } else {
    FUZZ_CHECK(!back.content_length());
    FUZZ_CHECK(back.chunked() == client.chunked());
  }
  for (const char* hop : {"Connection", "Keep-Alive", "Proxy-Connection", "TE", "Trailer",
                          "Upgrade", "Expect", "Proxy-Authorization"}) {
    FUZZ_CHECK(Count(got, hop) == 0);
  }
  FUZZ_CHECK(Count(got, "Host") == 1);
  FUZZ_CHECK(Count(got, "X-Request-Id") == 1);
  const size_t tokens = Count(got, s.settings.token_header);
  FUZZ_CHECK(tokens == (s.config.fencing.forward_token ? Count(req, s.settings.token_header) : 0));
  // An empty Host is valid HTTP/1.1 (RFC 9112 3.2) but refused from clients;
  // an HTTP/1.0 client may send one and it is passed on.
  const std::string problem = proxy::CheckRequestHead(got);
  FUZZ_CHECK(problem.empty() || problem == "empty Host header");
}

// Reads the body as the session does: into a 64 KiB buffer, over and over,
// at most `limit` bytes. false when the stream cannot go on (error, EOF in
// the middle, or more than `limit`).
bool ReadBody(http::request_parser<http::buffer_body>& parser, std::string_view input,
              size_t* offset, uint64_t limit) {
  static char buffer[64 * 1024];
  uint64_t read = 0;
  while (!parser.is_done()) {
    if (read > limit) return false;
    auto& body = parser.get().body();
    body.data = buffer;
    body.size = sizeof buffer;
    boost::beast::error_code ec;
    size_t used = parser.put(boost::asio::buffer(input.data() + *offset, input.size() - *offset),
                             ec);
    *offset += used;
    read += sizeof buffer - parser.get().body().size;
    if (ec == http::error::need_buffer) continue;
    if (ec) return false;  // need_more here means EOF mid-body: the session closes
    if (used == 0 && !parser.is_done()) return false;
  }
  return true;
}

void RunConnection(const Setup& s, std::string_view input) {
  const config::LimitsConfig& limits = s.config.limits;
  size_t offset = 0;
  for (int n = 0; n < 16 && offset < input.size(); ++n) {
    http::request_parser<http::buffer_body> parser;
    parser.header_limit(static_cast<uint32_t>(limits.max_header_bytes));
    parser.body_limit(limits.max_body_bytes);
    boost::beast::error_code ec;
    size_t used = parser.put(boost::asio::buffer(input.data() + offset, input.size() - offset), ec);
    offset += used;
    if (ec == http::error::need_more) return;  // the stream ends inside a head: closed
    if (ec) {
      // OnReadHeader: 431, 413, bad_path or bad_request, then close.
      CheckReply(proxy::MakeError(http::status::bad_request, "bad_request",
                                  "malformed HTTP request: " + ec.message()));
      return;
    }
    FUZZ_CHECK(parser.is_header_done());
    const auto& req = parser.get();
    bool keep_alive = req.keep_alive();
    std::string request_id = "fuzz-request-id";
    if (auto id = req.find("X-Request-Id");
        id != req.end() && proxy::IsValidRequestId(id->value())) {
      request_id = std::string(id->value());
    }

    std::optional<Reply> reply;
    proxy::CanonicalTarget target;
    if (proxy::HeadProblem problem = proxy::CheckHead(req, &target); !problem.ok()) {
      if (problem.close) keep_alive = false;
      reply = proxy::MakeError(problem.status, problem.code, problem.message);
    } else {
      FUZZ_CHECK(!target.path.empty() && target.path.front() == '/');
      // A Transfer-Encoding that passed is chunked alone, which the parser
      // de-chunks: no other coding is ever forwarded re-framed.
      FUZZ_CHECK(req.count(http::field::transfer_encoding) == 0 || parser.chunked());
      proxy::WriteIntent intent = proxy::Classify(s.settings, *s.router, req.method_string(),
                                                  target.path, req.base());
      if (intent.kind == proxy::WriteIntent::Kind::kReject) {
        FUZZ_CHECK(intent.reply.has_value());
        reply = std::move(*intent.reply);
      } else {
        if (intent.kind == proxy::WriteIntent::Kind::kFence) {
          CheckFenced(intent);
          // The replies the fence filter's verdict can make for this key.
          CheckReply(proxy::MakeStale(intent.key, intent.token, intent.token + 1));
          CheckReply(proxy::MakeStoreError(storage::Status::IoError("fuzz")));
          for (const storage::TreeTarget& t : intent.targets) {
            CheckReply(proxy::MakeNestedKeys(t.path, t.path + "/x", intent.key, !t.key.empty()));
            CheckReply(proxy::MakeStaleTree(intent.key, t.path, t.path, intent.token, 1));
          }
        }
        proxy::UpstreamRequest up;
        proxy::BuildUpstreamRequest(parser, target, s.config, s.client_ip, request_id, &up);
        CheckUpstream(s, parser, target, request_id, up);
      }
    }

    if (reply) {
      CheckReply(*reply);
      // SendReply: a small body is read and dropped so the connection
      // survives; otherwise (or with 100-continue) the connection closes.
      if (!parser.is_done() && (!keep_alive || proxy::ExpectsContinue(req.base()))) return;
      if (!ReadBody(parser, input, &offset, uint64_t{64} * 1024) || !keep_alive) return;
      continue;
    }
    if (!ReadBody(parser, input, &offset, UINT64_MAX) || !keep_alive) return;
  }
}

}  // namespace
}  // namespace fencegate::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input = fencegate::fuzz::AsText(data, size);
  for (const auto& setup : fencegate::fuzz::Setups()) {
    fencegate::fuzz::RunConnection(setup, input);
  }
  return 0;
}
