#pragma once
// The lock endpoint's requests and replies (docs/contract.md, "Lock
// service"), without sockets: URL shape and lock name, the JSON body, and the
// JSON reply to each answer of the service. LockSession reads a message and
// calls these.

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "locks/lock_service.h"
#include "net/replies.h"

namespace fencegate::locks {

enum class LockOp { kAcquire, kRenew, kRelease };

// Splits "/v1/locks/<enc-name>/<op>" and decodes the name. false when the
// target has another shape; *name_ok false when the name is not acceptable.
bool ParseLockTarget(std::string_view target, std::string* name, LockOp* op, bool* name_ok);

inline constexpr size_t kMaxLockBodyBytes = 4096;  // the parser's body limit

// A lock request, decoded and validated; what the session hands the service.
struct LockCall {
  std::string name;
  LockOp op{};
  Duration ttl{0};     // acquire: 0 < ttl <= max_ttl
  Duration wait{0};    // acquire: 0 <= wait <= max_ttl ("wait" absent: 0)
  uint64_t lease = 0;  // renew, release
};

// Decodes a whole request (target, method, JSON body), refusing it the way
// the endpoint documents: 404 for another URL, 400 bad_lock_name, 405,
// 400 bad_request (body not a JSON object), bad_ttl, ttl_too_long, bad_wait,
// bad_lease. Returns nullopt and sets *refusal when refused. Pure.
using LockRequest = proxy::http::request<proxy::http::string_body>;
std::optional<LockCall> DecodeLockRequest(const LockRequest& req, Duration max_ttl,
                                          proxy::Reply* refusal);

// The reply to a service answer for `name` (docs/contract.md, "Lock
// service": errors as JSON).
proxy::Reply LockReply(const std::string& name, LockOp op, const LockResult& result);

}  // namespace fencegate::locks
