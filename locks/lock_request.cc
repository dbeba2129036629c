#include "locks/lock_request.h"

#include <boost/url/pct_string_view.hpp>
#include <nlohmann/json.hpp>

#include "config/config.h"

namespace fencegate::locks {

namespace http = proxy::http;
using nlohmann::json;
using proxy::MakeError;
using proxy::MakeJson;

namespace {
constexpr std::string_view kLocksPrefix = "/v1/locks/";
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

std::optional<LockCall> DecodeLockRequest(const LockRequest& req, Duration max_ttl,
                                          proxy::Reply* refusal) {
  auto refuse = [refusal](proxy::Reply reply) {
    *refusal = std::move(reply);
    return std::nullopt;
  };
  LockCall call;
  bool name_ok = false;
  if (!ParseLockTarget(req.target(), &call.name, &call.op, &name_ok)) {
    return refuse(MakeError(http::status::not_found, "not_found",
                            "no lock endpoint " + std::string(req.target()) +
                                "; use POST /v1/locks/{name}/acquire|renew|release"));
  }
  if (!name_ok) {
    return refuse(MakeError(http::status::bad_request, "bad_lock_name",
                            "the lock name must be one percent-encoded path segment of 1 to 256 "
                            "bytes without control characters"));
  }
  if (req.method() != http::verb::post) {
    return refuse(MakeError(http::status::method_not_allowed, "method_not_allowed", "use POST"));
  }
  json body = req.body().empty() ? json::object() : json::parse(req.body(), nullptr, false);
  if (!body.is_object()) {
    return refuse(
        MakeError(http::status::bad_request, "bad_request", "the body must be a JSON object"));
  }
  if (call.op != LockOp::kAcquire) {
    std::optional<uint64_t> lease = LeaseField(body);
    if (!lease) {
      return refuse(MakeError(http::status::bad_request, "bad_lease",
                              "the body must be {\"lease\": ID} with the id that acquire "
                              "returned"));
    }
    call.lease = *lease;
    return call;
  }
  std::optional<Duration> ttl = DurationField(body, "ttl", std::nullopt);
  if (!ttl || *ttl <= Duration{0}) {
    return refuse(MakeError(http::status::bad_request, "bad_ttl",
                            "\"ttl\" is required: a positive duration string such as \"10s\" or "
                            "\"1500ms\""));
  }
  json limit = {{"max_ttl_ms", max_ttl.count()}};
  if (*ttl > max_ttl) {
    return refuse(MakeError(http::status::bad_request, "ttl_too_long",
                            "\"ttl\" is over locks.max_ttl (" + std::to_string(max_ttl.count()) +
                                "ms)",
                            limit));
  }
  std::optional<Duration> wait = DurationField(body, "wait", Duration{0});
  if (!wait) {
    return refuse(MakeError(http::status::bad_request, "bad_wait",
                            "\"wait\" must be a duration string such as \"5s\" or \"0s\""));
  }
  if (*wait > max_ttl) {
    return refuse(MakeError(http::status::bad_request, "bad_wait",
                            "\"wait\" is over locks.max_ttl, which also bounds waits", limit));
  }
  call.ttl = *ttl;
  call.wait = *wait;
  return call;
}

proxy::Reply LockReply(const std::string& name, LockOp op, const LockResult& r) {
  json lock = {{"lock", name}};
  switch (r.error) {
    case LockError::kNone:
      if (op == LockOp::kRelease) {
        return MakeJson(http::status::ok,
                        {{"token", r.token}, {"lease", r.lease}, {"released", true}});
      }
      return MakeJson(http::status::ok, {{"token", r.token},
                                         {"lease", r.lease},
                                         {"expires_in_ms", r.expires_in.count()}});
    case LockError::kHeld:
      lock["expires_in_ms"] = r.expires_in.count();
      return MakeError(http::status::conflict, "lock_held", "the lock is held by another lease",
                       lock);
    case LockError::kUnknownLease:
      return MakeError(http::status::not_found, "unknown_lease",
                       std::string("no such lease holds this lock (never granted, released, "
                                   "or granted before a restart); cannot ") +
                           OpName(op),
                       lock);
    case LockError::kLeaseExpired:
      return MakeError(http::status::gone, "lease_expired",
                       std::string("the lease expired (its ttl passed without a renew); "
                                   "cannot ") + OpName(op) + ", acquire again",
                       lock);
    case LockError::kStore:
      return proxy::MakeStoreError(r.status);
    case LockError::kShuttingDown:
      break;
  }
  return MakeError(http::status::service_unavailable, "shutting_down",
                   "the lock service is stopping", lock);
}

}  // namespace fencegate::locks
