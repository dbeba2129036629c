#pragma once
// Classify (docs/contract.md, "The write path"): decides, for a request
// whose head has been read, whether it passes through, is refused by
// fencegate, or is a fenced write with its token and keys. Pure: no store,
// no queue, no socket.

#include <boost/beast/http/fields.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fence/canonical_path.h"
#include "fence/idempotency_key.h"
#include "fence/router.h"
#include "net/replies.h"
#include "storage/tree.h"

namespace fencegate::proxy {

// What Classify decided. (bugprone-exception-escape: the implicit move
// assignment of `reply`, a Beast response, has a throwing branch for
// unequal allocators, which std::allocator never is.)
struct WriteIntent {  // NOLINT(bugprone-exception-escape)
  enum class Kind {
    kPassThrough,  // no fenced route: forward unchanged, no token needed
    kReject,       // fencegate answers `reply` itself; nothing is forwarded
    kFence,        // a fenced write with a valid token: run Check() first
  };
  Kind kind = Kind::kPassThrough;
  const Route* route = nullptr;  // the matched route, if any
  std::optional<Reply> reply;    // for kReject
  std::string outcome;           // metrics/log outcome (docs/contract.md, "Metrics")
  std::string key;               // for kFence (and for logs when known)
  // Further keys the same write fences with the same token (COPY and MOVE:
  // the Destination), distinct from `key` and from each other; all or
  // nothing. Empty for almost every request.
  std::vector<std::string> extra_keys;
  uint64_t token = 0;            // for kFence
  // A COPY or MOVE with a Destination: the header as the backend receives
  // it (canonical spelling); nullopt when the request has none to rewrite.
  std::optional<CanonicalDestination> destination;
  // The write's targets in the tree of paths (docs/contract.md, "Nested
  // resources"): its path and a COPY's or MOVE's Destination, where a route
  // puts them in the tree, or no route covers a subtree write that may
  // reach into it. Empty for a write the tree does not concern (and for
  // every read). With targets, a kFence is decided by AdvanceTree; one with
  // only uncovered targets has no key and no token.
  std::vector<storage::TreeTarget> targets;
  bool shadow = false;           // route mode is shadow: never refuse
  // A write on a route with `idempotency:` that carries a key (valid, and
  // sent once): the record it names. Independent of the fence: set in
  // every mode, and with kFence or kPassThrough alike.
  IdempotentRequest idempotency;
  std::string shadow_violation;  // shadow mode: what would have been refused
};

struct FenceSettings {
  std::string token_header = "Fencing-Token";
};

// The token and the key of the write path (docs/contract.md, "The write
// path"). `canonical_path` is CanonicalizeTarget's path.
// Besides the route's token and key it refuses (400) what could write one
// resource under another key or slip past the fence: a ';' in the path of
// a request that may write (unless its route keeps path parameters), a
// method-override header that is not a method, a Connection header that
// nominates the token header or a key header, a key header sent twice or
// as a list, a bad Destination, and on a route with `idempotency:` a key
// sent twice or not 1..255 visible ASCII bytes (400 bad_idempotency_key),
// a missing one when the route requires it (400 idempotency_key_required),
// and a scope that does not expand. The request's methods are its own and
// those its override headers name: fenced if any of them is.
WriteIntent Classify(const FenceSettings& settings, const Router& router,
                     std::string_view method, std::string_view canonical_path,
                     const boost::beast::http::fields& headers);
// The same into *out, whose strings keep their buffers (a session classifies
// request after request into one WriteIntent, without allocating its key).
void Classify(const FenceSettings& settings, const Router& router, std::string_view method,
              std::string_view canonical_path, const boost::beast::http::fields& headers,
              WriteIntent* out);

}  // namespace fencegate::proxy
