#include "admin/admin_session.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/prefer.hpp>
#include <chrono>

#include "admin/admin_request.h"
#include "admin/idempotency_answer.h"
#include "admin/path_answer.h"
#include "fence/canonical_path.h"
#include "net/head_limit.h"

namespace fencegate::proxy {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;
using nlohmann::json;

namespace {
constexpr std::string_view kIdempotencyPath = "/v1/idempotency";
constexpr std::string_view kPathsPrefix = "/v1/paths/";
constexpr size_t kMaxAdminBody = size_t{64} * 1024;
constexpr size_t kHeadReadSize = size_t{64} * 1024;  // the most a head read asks for
// The Prometheus text exposition format, version 0.0.4.
constexpr std::string_view kMetricsContentType = "text/plain; version=0.0.4; charset=utf-8";

// The records' clock, as the idempotency gates read it.
int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}
}  // namespace

AdminSession::AdminSession(tcp::socket&& socket, AdminContext& context)
    : stream_(std::move(socket)), ctx_(context) {}

AdminSession::~AdminSession() { ctx_.sessions.erase(this); }

void AdminSession::Run() {
  ctx_.sessions.insert(this);
  DoRead();
}

void AdminSession::Close() {
  beast::error_code ignored;
  stream_.socket().close(ignored);
}

void AdminSession::DoRead() {
  config_ = ctx_.config();
  parser_.emplace();
  head_request_ = false;
  head_bytes_ = 0;  // PutHead sets the parser's header_limit
  parser_->body_limit(kMaxAdminBody);
  stream_.expires_after(config_->limits.header_timeout);  // every read of this request
  ReadHead();
}

void AdminSession::ReadHead() {
  // The head is read here, not by http::async_read, so that
  // limits.max_header_bytes bounds all of it (head_limit.h).
  beast::error_code ec;
  if (PutHead(*parser_, buffer_, config_->limits.max_header_bytes, &head_bytes_, ec)) {
    if (ec || parser_->is_done()) return OnRead(ec);
    return http::async_read(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnRead(ec); });
  }
  stream_.async_read_some(buffer_.prepare(beast::read_size(buffer_, kHeadReadSize)),
                          [self = shared_from_this()](beast::error_code ec, size_t n) {
                            self->buffer_.commit(n);
                            if (!ec) return self->ReadHead();
                            // As Beast's reads say it: EOF within a head is
                            // a partial message, before one the end of the stream.
                            if (ec == asio::error::eof) {
                              ec = self->parser_->got_some() ? http::error::partial_message
                                                             : http::error::end_of_stream;
                            }
                            self->OnRead(ec);
                          });
}

void AdminSession::OnRead(beast::error_code ec) {
  if (ec == http::error::end_of_stream || ec == asio::error::eof) {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    return;
  }
  if (ec) {
    keep_alive_ = false;
    if (ec == beast::error::timeout || ec == asio::error::operation_aborted) return;
    if (ec == http::error::header_limit) {
      return Send(MakeError(http::status::request_header_fields_too_large, "headers_too_large",
                            "the request head is larger than limits.max_header_bytes (" +
                                std::to_string(config_->limits.max_header_bytes) + ")"));
    }
    if (ec == http::error::body_limit) {
      return Send(MakeError(http::status::payload_too_large, "body_too_large",
                            "an admin request body is at most " + std::to_string(kMaxAdminBody) +
                                " bytes"));
    }
    return Send(MakeError(http::status::bad_request, "bad_request",
                          "malformed admin request: " + ec.message()));
  }
  keep_alive_ = parser_->get().keep_alive();
  head_request_ = parser_->get().method() == http::verb::head;
  Handle();
}

void AdminSession::Handle() {
  config_ = ctx_.config();  // a reload while the head was read counts
  const auto& req = parser_->get();
  std::string_view target = req.target();
  std::string key;
  bool fence = false;
  if (target == "/healthz") {
    if (req.method() != http::verb::get && req.method() != http::verb::head) {
      return Send(MakeError(http::status::method_not_allowed, "method_not_allowed", "use GET"));
    }
    return Send(MakeJson(http::status::ok, {{"status", "ok"}}));
  }
  if (target == "/readyz") return HandleReady();
  if (target == "/metrics" && ctx_.metrics) return HandleMetrics();
  if (target == "/v1/test/store-faults" && ctx_.set_faults) return HandleFaults();
  if (target == "/v1/reload" && ctx_.reload) return HandleReload();
  if (target == kIdempotencyPath) return HandleIdempotencyCounters();
  if (target.substr(0, kIdempotencyPrefix.size()) == kIdempotencyPrefix) {
    return HandleIdempotencyRecord();
  }
  if (target.starts_with(kPathsPrefix)) return HandlePath();
  if (ParseAdminKeyTarget(target, &key, &fence)) {
    // Refused here, with what is wrong: the store would answer it as a
    // failure (503).
    if (std::string problem = CheckAdminKey(key); !problem.empty()) {
      return Send(MakeError(http::status::bad_request, "bad_key", problem));
    }
    return HandleKey(key, fence);
  }
  if (target.substr(0, kKeysPrefix.size()) == kKeysPrefix) {
    return Send(MakeError(http::status::bad_request, "bad_key",
                          "the key must be percent-encoded as one path segment, e.g. "
                          "/v1/keys/%2Fobjects%2Fa"));
  }
  Send(MakeError(http::status::not_found, "not_found",
                 "no admin endpoint " + std::string(target)));
}

bool AdminSession::Authorized() {
  const auto& req = parser_->get();
  // Two credentials: which one counts would be a guess, and a proxy in
  // front of the admin listener may guess the other way.
  if (req.count(http::field::authorization) > 1) {
    Send(MakeError(http::status::bad_request, "bad_request", "more than one Authorization header"));
    return false;
  }
  const std::string& token = config_->admin.token;
  if (token.empty()) {
    Send(MakeError(http::status::forbidden, "admin_writes_disabled",
                   "admin writes are disabled: set admin.token, admin.token_file or "
                   "admin.token_env in the config"));
    return false;
  }
  auto it = req.find(http::field::authorization);
  bool ok = it != req.end() && BearerMatches(it->value(), token);
  if (!ok) {
    Reply r = MakeError(http::status::unauthorized, "unauthorized",
                        "admin writes need the header Authorization: Bearer <admin.token>");
    r.set(http::field::www_authenticate, "Bearer realm=\"fencegate-admin\"");
    Send(std::move(r));
  }
  return ok;
}

void AdminSession::HandleKey(const std::string& key, bool fence) {
  const auto& req = parser_->get();
  // Outstanding work on the admin io_context until the store has answered:
  // its run() must not return, and the Server that owns this session's
  // context must not be destroyed, while a store answer is on its way (a
  // request in flight at shutdown).
  auto work = asio::prefer(stream_.get_executor(), asio::execution::outstanding_work.tracked);
  if (!fence) {
    if (req.method() != http::verb::get) {
      return Send(MakeError(http::status::method_not_allowed, "method_not_allowed", "use GET"));
    }
    ctx_.store->Get(key, [self = shared_from_this(), key, work](
                             const storage::Status& st, std::optional<uint64_t> token) mutable {
      if (!st.ok()) return SendFromStore(std::move(self), MakeStoreError(st));
      if (!token) {
        return SendFromStore(std::move(self),
                             MakeError(http::status::not_found, "not_found",
                                       "no token was ever accepted for this key", {{"key", key}}));
      }
      SendFromStore(std::move(self), MakeJson(http::status::ok, {{"key", key}, {"token", *token}}));
    });
    return;
  }
  if (req.method() != http::verb::post) {
    return Send(MakeError(http::status::method_not_allowed, "method_not_allowed", "use POST"));
  }
  if (!Authorized()) return;
  FenceBody body = ParseFenceBody(req.body());
  if (!body.token) return Send(MakeError(http::status::bad_request, body.code, body.message));
  const uint64_t token = *body.token;
  auto raised = [self = shared_from_this(), key, work](const storage::Status& st,
                                                       storage::Fence f) mutable {
    if (!st.ok()) return SendFromStore(std::move(self), MakeStoreError(st));
    spdlog::info("admin: fence for key {} raised to at least {}", key, f.current);
    SendFromStore(std::move(self),
                  MakeJson(http::status::ok, {{"key", key}, {"token", f.current}}));
  };
  auto raise = [&] {
    std::optional<std::string> path;
    if (ctx_.tree_path_of_key) path = ctx_.tree_path_of_key(key);
    if (!path) return ctx_.store->Raise(key, token, std::move(raised));
    // The key fences a path of the tree: its node takes the fence with the
    // key, as an accepted write would leave it, so that a write over the
    // path (a DELETE of a collection above it) is decided against it too.
    storage::TreeWrite write;
    write.keys = {key};
    write.token = token;
    write.targets = {storage::TreeTarget{std::move(*path), key, /*subtree=*/false,
                                         storage::Nesting::kPerKey}};
    write.raise = true;
    ctx_.store->AdvanceTree(std::move(write),
                            [raised = std::move(raised)](const storage::Status& st,
                                                         storage::TreeVerdict v) mutable {
                              const uint64_t current = v.current.empty() ? 0 : v.current.front();
                              raised(st, storage::Fence{st.ok(), current});
                            });
  };
  // Through the key's queue (docs/contract.md, "Admin API"): the writes
  // already queued for the key, whose Advances the store decided before this
  // Raise, learn the fence at their turn and are refused if their token is
  // lower. The answer still waits for the Raise to be durable.
  if (ctx_.queue == nullptr) return raise();
  ctx_.queue->Fence(key, token, raise);
}

void AdminSession::HandleFaults() {
  if (parser_->get().method() != http::verb::put) {
    return Send(MakeError(http::status::method_not_allowed, "method_not_allowed", "use PUT"));
  }
  if (!Authorized()) return;
  json body = json::parse(parser_->get().body(), nullptr, false);
  if (!body.is_object()) {
    return Send(MakeError(http::status::bad_request, "bad_request", "body must be a JSON object"));
  }
  storage::FaultSpec spec;
  spec.fail_writes = body.value("fail_writes", false);
  spec.fail_reads = body.value("fail_reads", false);
  spec.delay = std::chrono::milliseconds(body.value("delay_ms", 0));
  ctx_.set_faults(spec);
  spdlog::warn("test faults set: fail_writes={} fail_reads={} delay_ms={}", spec.fail_writes,
               spec.fail_reads, spec.delay.count());
  Send(MakeJson(http::status::ok, body));
}

void AdminSession::HandleReload() {
  if (parser_->get().method() != http::verb::post) {
    return Send(MakeError(http::status::method_not_allowed, "method_not_allowed", "use POST"));
  }
  if (!Authorized()) return;
  // On this thread, as SIGHUP's reload: one at a time.
  ReloadOutcome outcome = ctx_.reload();
  if (!outcome.applied) {
    json extra = {{"source", outcome.source}};
    if (!outcome.fields.empty()) extra["fields"] = outcome.fields;
    // Stopping is no fault of the file.
    const http::status status = outcome.error == "draining" ? http::status::service_unavailable
                                                            : http::status::unprocessable_entity;
    return Send(MakeError(status, outcome.error, outcome.message, extra));
  }
  Send(MakeJson(http::status::ok, {{"status", "reloaded"},
                                   {"source", outcome.source},
                                   {"routes", outcome.routes}}));
}

void AdminSession::HandleIdempotencyCounters() {
  if (parser_->get().method() != http::verb::get) {
    return Send(MakeError(http::status::method_not_allowed, "method_not_allowed", "use GET"));
  }
  static const IdempotencyCounters kNothingCounted;
  const IdempotencyCounters* counters = ctx_.idempotency_counters;
  Send(MakeJson(http::status::ok,
                IdempotencyCountersJson(counters != nullptr ? *counters : kNothingCounted)));
}

void AdminSession::HandleIdempotencyRecord() {
  const auto& req = parser_->get();
  if (req.method() != http::verb::get) {
    return Send(MakeError(http::status::method_not_allowed, "method_not_allowed", "use GET"));
  }
  // A stored response may be private, and so may which routes and keys
  // exist: the bearer first, as for the admin writes.
  if (!Authorized()) return;
  IdempotencyTarget t;
  if (!ParseIdempotencyTarget(req.target(), &t)) {
    return Send(MakeError(http::status::bad_request, "bad_request",
                          "the target must be /v1/idempotency/{route}/{key}, optionally with "
                          "?scope=S, each part percent-encoded and {route} and {key} one path "
                          "segment each"));
  }
  const auto& routes = config_->routes;
  auto found = std::find_if(routes.begin(), routes.end(),
                            [&](const config::RouteConfig& r) { return r.name == t.route; });
  if (found == routes.end()) {
    return Send(MakeError(http::status::not_found, "unknown_route",
                          "no route is named " + t.route, {{"route", t.route}}));
  }
  const std::optional<config::IdempotencyConfig>& idempotency = found->idempotency;
  if (!idempotency || ctx_.idempotency == nullptr) {
    return Send(MakeError(http::status::not_found, "not_idempotent",
                          "route " + t.route + " has no idempotency keys (idempotency: off)",
                          {{"route", t.route}}));
  }
  if (!IsValidIdempotencyKey(t.key)) {
    return Send(MakeError(http::status::bad_request, "bad_idempotency_key",
                          "an idempotency key is 1 to " + std::to_string(kMaxIdempotencyKeyBytes) +
                              " visible ASCII characters"));
  }
  // A scope names the record as the route's scope template expanded it;
  // a route that scopes its keys has no record without one.
  const bool scoped = !t.scope.empty();
  std::string hint = "no live record for this key";
  if (!scoped && !idempotency->scope.empty()) {
    hint += "; the route scopes its keys by " + idempotency->scope + ": add ?scope=";
  } else if (scoped && idempotency->scope.empty()) {
    hint += "; the route does not scope its keys: leave out ?scope=";
  }
  // Outstanding work until the store has answered, as in HandleKey.
  auto work = asio::prefer(stream_.get_executor(), asio::execution::outstanding_work.tracked);
  std::string record_key = IdempotencyRecordKey(t.route, t.scope, t.key);
  ctx_.idempotency->LookupKey(
      std::move(record_key), NowMs(),
      [self = shared_from_this(), route = t.route, key = t.key, scoped, hint, work](
          const storage::Status& st, std::optional<storage::IdempotencyRecord> record) mutable {
        if (!st.ok()) return SendFromStore(std::move(self), MakeStoreError(st));
        if (!record) {
          return SendFromStore(std::move(self),
                               MakeError(http::status::not_found, "no_record", hint,
                                         {{"route", route}, {"key", key}}));
        }
        json body = IdempotencyRecordJson(route, key, scoped, *record);
        SendFromStore(std::move(self), MakeJson(http::status::ok, body));
      });
}

void AdminSession::HandlePath() {
  const auto& req = parser_->get();
  if (req.method() != http::verb::get) {
    return Send(MakeError(http::status::method_not_allowed, "method_not_allowed", "use GET"));
  }
  // "/v1/paths/objects/d" is the path "/objects/d", spelt as requests spell
  // it and made canonical as theirs are.
  const std::string_view rest = req.target().substr(kPathsPrefix.size() - 1);
  CanonicalTarget canon;
  if (PathError e = CanonicalizeTarget(rest, &canon); e != PathError::kNone || canon.has_query) {
    return Send(MakeError(http::status::bad_request, "bad_path",
                          e != PathError::kNone ? PathErrorMessage(e)
                                                : "the target must be /v1/paths{path}, no query"));
  }
  auto work = asio::prefer(stream_.get_executor(), asio::execution::outstanding_work.tracked);
  ReadPathNodes(*ctx_.store, canon.path,
                [self = shared_from_this(), path = canon.path, work](
                    const storage::Status& st, const PathNodes& nodes) mutable {
                  if (!st.ok()) return SendFromStore(std::move(self), MakeStoreError(st));
                  std::optional<json> body = PathJson(path, nodes);
                  if (!body) {
                    return SendFromStore(
                        std::move(self),
                        MakeError(http::status::not_found, "not_found",
                                  "nothing in the tree of paths bears on this path",
                                  {{"path", path}}));
                  }
                  SendFromStore(std::move(self), MakeJson(http::status::ok, *body));
                });
}

void AdminSession::HandleMetrics() {
  const auto& req = parser_->get();
  if (req.method() != http::verb::get && req.method() != http::verb::head) {
    return Send(MakeError(http::status::method_not_allowed, "method_not_allowed", "use GET"));
  }
  Reply r{http::status::ok, req.version()};
  r.set(http::field::content_type, kMetricsContentType);
  r.body() = ctx_.metrics();
  r.prepare_payload();
  Send(std::move(r));
}

void AdminSession::HandleReady() {
  storage::Status st = ctx_.store->Health();
  if (!st.ok()) {
    return Send(MakeJson(http::status::service_unavailable,
                         {{"status", "not_ready"}, {"store", st.ToString()}}));
  }
  // The upstream is ready when it accepts a TCP connection in time.
  auto resolver = std::make_shared<tcp::resolver>(stream_.get_executor());
  auto probe = std::make_shared<beast::tcp_stream>(stream_.get_executor());
  probe->expires_after(config_->upstream.connect_timeout);
  const auto& up = config_->upstream;
  resolver->async_resolve(
      up.host, std::to_string(up.port),
      [self = shared_from_this(), resolver, probe](
          beast::error_code ec, const tcp::resolver::results_type& results) {
        auto done = [self, probe](beast::error_code ec) {
          if (ec) {
            return self->Send(MakeJson(http::status::service_unavailable,
                                       {{"status", "not_ready"}, {"store", "ok"},
                                        {"upstream", ec.message()}}));
          }
          self->Send(MakeJson(http::status::ok,
                              {{"status", "ready"}, {"store", "ok"}, {"upstream", "ok"}}));
        };
        if (ec) return done(ec);
        probe->async_connect(results, [done](beast::error_code ec, const tcp::endpoint&) {
          done(ec);
        });
      });
}

void AdminSession::Send(Reply reply) { SendFromStore(shared_from_this(), std::move(reply)); }

void AdminSession::SendFromStore(std::shared_ptr<AdminSession> self, Reply reply) {
  auto executor = self->stream_.get_executor();
  asio::post(executor, [self = std::move(self), r = std::move(reply)]() mutable {
    r.keep_alive(self->keep_alive_);
    self->reply_ = std::move(r);
    auto on_written = [self](beast::error_code ec, size_t) {
      if (ec || !self->keep_alive_) {
        beast::error_code ignored;
        self->stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
        return;
      }
      self->DoRead();
    };
    AsyncWriteReply(self->stream_, self->reply_, self->serializer_, self->head_request_,
                    on_written);
  });
}

}  // namespace fencegate::proxy
