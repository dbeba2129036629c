#include "locks/lock_session.h"

#include <spdlog/spdlog.h>

#include <boost/asio/post.hpp>
#include <boost/url/pct_string_view.hpp>

#include "config/config.h"

namespace fencegate::locks {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = proxy::http;
using tcp = asio::ip::tcp;
using nlohmann::json;
using proxy::MakeError;
using proxy::MakeJson;

namespace {
constexpr std::string_view kLocksPrefix = "/v1/locks/";
constexpr size_t kMaxLockBody = 4096;
constexpr size_t kMaxNameBytes = 256;

bool NameAcceptable(std::string_view name) {
  if (name.empty() || name.size() > kMaxNameBytes) return false;
  for (unsigned char c : name) {
    if (c < 0x20 || c == 0x7f) return false;
  }
  return true;
}

// A duration field: absent -> `absent`; else a string ParseDuration takes.
std::optional<Duration> DurationField(const json& body, const char* field,
                                      std::optional<Duration> absent) {
  if (!body.contains(field)) return absent;
  const json& v = body[field];
  if (!v.is_string()) return std::nullopt;
  return config::ParseDuration(v.get_ref<const std::string&>());
}

// A lease id: a JSON unsigned integer, or a string of decimal digits.
std::optional<uint64_t> LeaseField(const json& body) {
  if (!body.contains("lease")) return std::nullopt;
  const json& v = body["lease"];
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return static_cast<uint64_t>(v.get<int64_t>());
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    if (s.empty() || s.size() > 19) return std::nullopt;
    uint64_t id = 0;
    for (char c : s) {
      if (c < '0' || c > '9') return std::nullopt;
      id = id * 10 + static_cast<uint64_t>(c - '0');
    }
    return id;
  }
  return std::nullopt;
}

const char* OpName(LockOp op) {
  switch (op) {
    case LockOp::kAcquire: return "acquire";
    case LockOp::kRenew: return "renew";
    case LockOp::kRelease: return "release";
  }
  return "";
}
}  // namespace

bool ParseLockTarget(std::string_view target, std::string* name, LockOp* op, bool* name_ok) {
  if (target.substr(0, kLocksPrefix.size()) != kLocksPrefix) return false;
  std::string_view rest = target.substr(kLocksPrefix.size());
  size_t slash = rest.rfind('/');
  if (slash == std::string_view::npos) return false;
  std::string_view verb = rest.substr(slash + 1);
  if (verb == "acquire") {
    *op = LockOp::kAcquire;
  } else if (verb == "renew") {
    *op = LockOp::kRenew;
  } else if (verb == "release") {
    *op = LockOp::kRelease;
  } else {
    return false;
  }
  std::string_view encoded = rest.substr(0, slash);
  *name_ok = false;
  if (encoded.find('/') != std::string_view::npos || encoded.find('?') != std::string_view::npos) {
    return true;
  }
  auto pct = boost::urls::make_pct_string_view(encoded);
  if (!pct) return true;
  *name = pct->decode();
  *name_ok = NameAcceptable(*name);
  return true;
}

LockSession::LockSession(tcp::socket&& socket, LockContext& context)
    : stream_(std::move(socket)), ctx_(context) {}

LockSession::~LockSession() { ctx_.sessions.erase(this); }

void LockSession::Run() {
  ctx_.sessions.insert(this);
  DoRead();
}

void LockSession::Close() {
  beast::error_code ignored;
  stream_.socket().close(ignored);
}

void LockSession::DoRead() {
  parser_.emplace();
  parser_->header_limit(static_cast<uint32_t>(ctx_.max_header_bytes));
  parser_->body_limit(kMaxLockBody);
  stream_.expires_after(ctx_.header_timeout);
  http::async_read(stream_, buffer_, *parser_,
                   [self = shared_from_this()](beast::error_code ec, size_t) { self->OnRead(ec); });
}

void LockSession::OnRead(beast::error_code ec) {
  if (ec == http::error::end_of_stream || ec == asio::error::eof) {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    return;
  }
  if (ec) {
    keep_alive_ = false;
    if (ec == beast::error::timeout || ec == asio::error::operation_aborted) return;
    return Send(MakeError(http::status::bad_request, "bad_request",
                          "malformed request: " + ec.message()));
  }
  keep_alive_ = parser_->get().keep_alive();
  // No deadline while an acquire waits: the wait is bounded by max_ttl.
  stream_.expires_never();
  Handle();
}

void LockSession::Handle() {
  const auto& req = parser_->get();
  std::string name;
  LockOp op{};
  bool name_ok = false;
  if (!ParseLockTarget(req.target(), &name, &op, &name_ok)) {
    return Send(MakeError(http::status::not_found, "not_found",
                          "no lock endpoint " + std::string(req.target()) +
                              "; use POST /v1/locks/{name}/acquire|renew|release"));
  }
  if (!name_ok) {
    return Send(MakeError(http::status::bad_request, "bad_lock_name",
                          "the lock name must be one percent-encoded path segment of 1 to 256 "
                          "bytes without control characters"));
  }
  if (req.method() != http::verb::post) {
    return Send(MakeError(http::status::method_not_allowed, "method_not_allowed", "use POST"));
  }
  json body = req.body().empty() ? json::object() : json::parse(req.body(), nullptr, false);
  if (!body.is_object()) {
    return Send(MakeError(http::status::bad_request, "bad_request", "the body must be a JSON object"));
  }
  if (op == LockOp::kAcquire) return HandleAcquire(name, body);
  HandleLease(name, op, body);
}

void LockSession::HandleAcquire(const std::string& name, const json& body) {
  std::optional<Duration> ttl = DurationField(body, "ttl", std::nullopt);
  if (!ttl || *ttl <= Duration{0}) {
    return Send(MakeError(http::status::bad_request, "bad_ttl",
                          "\"ttl\" is required: a positive duration string such as \"10s\" or "
                          "\"1500ms\""));
  }
  json limit = {{"max_ttl_ms", ctx_.max_ttl.count()}};
  if (*ttl > ctx_.max_ttl) {
    return Send(MakeError(http::status::bad_request, "ttl_too_long",
                          "\"ttl\" is over locks.max_ttl (" + std::to_string(ctx_.max_ttl.count()) +
                              "ms)",
                          limit));
  }
  std::optional<Duration> wait = DurationField(body, "wait", Duration{0});
  if (!wait) {
    return Send(MakeError(http::status::bad_request, "bad_wait",
                          "\"wait\" must be a duration string such as \"5s\" or \"0s\""));
  }
  if (*wait > ctx_.max_ttl) {
    return Send(MakeError(http::status::bad_request, "bad_wait",
                          "\"wait\" is over locks.max_ttl, which also bounds waits", limit));
  }
  ctx_.service->Acquire(name, *ttl, *wait, [self = shared_from_this(), name](const LockResult& r) {
    self->Answer(name, LockOp::kAcquire, r);
  });
}

void LockSession::HandleLease(const std::string& name, LockOp op, const json& body) {
  std::optional<uint64_t> lease = LeaseField(body);
  if (!lease) {
    return Send(MakeError(http::status::bad_request, "bad_lease",
                          "the body must be {\"lease\": ID} with the id that acquire returned"));
  }
  auto done = [self = shared_from_this(), name, op](const LockResult& r) {
    self->Answer(name, op, r);
  };
  if (op == LockOp::kRenew) return ctx_.service->Renew(name, *lease, done);
  ctx_.service->Release(name, *lease, done);
}

void LockSession::Answer(const std::string& name, LockOp op, const LockResult& r) {
  json lock = {{"lock", name}};
  switch (r.error) {
    case LockError::kNone:
      if (op == LockOp::kRelease) {
        return Send(MakeJson(http::status::ok,
                             {{"token", r.token}, {"lease", r.lease}, {"released", true}}));
      }
      return Send(MakeJson(http::status::ok, {{"token", r.token},
                                              {"lease", r.lease},
                                              {"expires_in_ms", r.expires_in.count()}}));
    case LockError::kHeld:
      lock["expires_in_ms"] = r.expires_in.count();
      return Send(MakeError(http::status::conflict, "lock_held",
                            "the lock is held by another lease", lock));
    case LockError::kUnknownLease:
      return Send(MakeError(http::status::not_found, "unknown_lease",
                            std::string("no such lease holds this lock (never granted, released, "
                                        "or granted before a restart); cannot ") +
                                OpName(op),
                            lock));
    case LockError::kLeaseExpired:
      return Send(MakeError(http::status::gone, "lease_expired",
                            std::string("the lease expired (its ttl passed without a renew); "
                                        "cannot ") + OpName(op) + ", acquire again",
                            lock));
    case LockError::kStore:
      return Send(proxy::MakeStoreError(r.status));
    case LockError::kShuttingDown:
      return Send(MakeError(http::status::service_unavailable, "shutting_down",
                            "the lock service is stopping", lock));
  }
}

void LockSession::Send(proxy::Reply reply) {
  asio::post(stream_.get_executor(), [self = shared_from_this(), r = std::move(reply)]() mutable {
    r.keep_alive(self->keep_alive_);
    self->reply_ = std::move(r);
    self->stream_.expires_after(self->ctx_.header_timeout);
    http::async_write(self->stream_, self->reply_, [self](beast::error_code ec, size_t) {
      if (ec || !self->keep_alive_) {
        beast::error_code ignored;
        self->stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
        return;
      }
      self->DoRead();
    });
  });
}

}  // namespace fencegate::locks
