#pragma once
// What the data plane counts per request (docs/contract.md, "Metrics"):
// requests by route and outcome, shadow violations by route, the request's
// and the upstream exchange's durations. One RequestShard per I/O thread,
// written only by that thread when a request ends; the metrics endpoint
// sums the shards at scrape time (metrics/exposition.h).
//
// Label values are bounded: a route is one of the configured routes (or
// none), an outcome one of the values of Outcome. Never a key, a token or a
// path.

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

#include "metrics/histogram.h"

namespace fencegate::metrics {

// The outcome of a request, as the access log names it. The first six are
// the contract's; the others are what fencegate also answers.
enum class Outcome : uint8_t {
  kForwarded,         // relayed from the backend
  kStale,             // 409 stale_token
  kTokenRequired,     // 428 token_required
  kBadRequest,        // 400, 413, 431: refused before the store or the backend
  kStoreUnavailable,  // 503 store_unavailable
  kUpstreamError,     // 502 upstream_error, 504 upstream_timeout, or cut mid-response
  kOverloaded,        // 503 too_many_waiting
  kExpired,           // 503 fence_expired (storage.etcd.forward_within)
  kReplayed,          // an idempotency key's stored response
  kIdempotencyMismatch,         // 422
  kIdempotencyInFlight,         // 409
  kIdempotencyResponseNotKept,  // 409
  kClientError,       // the client went away mid-request
  kNestedKeys,        // 409 nested_keys: a subtree write no token of its orders
  kKeyMoving,         // 503 key_moving: another replica owns the key (storage.etcd.ownership)
};
inline constexpr size_t kOutcomes = 15;

// The label value ("forwarded", ...).
std::string_view OutcomeName(Outcome outcome);
// The Outcome the access log's `outcome` string names; nullopt for any
// other string.
std::optional<Outcome> OutcomeOf(std::string_view name);

class RequestShard {
 public:
  using Duration = LatencyHistogram::Duration;

  // `routes`: how many routes the config has. Route slot 0 is a request no
  // route matched; slot i + 1 is routes[i].
  explicit RequestShard(size_t routes);

  size_t route_slots() const { return route_slots_; }

  // A request ended. Only the shard's own thread calls it. `upstream`: the
  // time of the upstream exchange, when there was one.
  void Count(size_t route_slot, Outcome outcome, bool shadow_violation, Duration total,
             std::optional<Duration> upstream) {
    Bump(requests_[route_slot * kOutcomes + static_cast<size_t>(outcome)]);
    if (shadow_violation) Bump(shadow_violations_[route_slot]);
    request_duration_.Record(total);
    if (upstream) upstream_duration_.Record(*upstream);
  }

  // Readers, any thread.
  uint64_t requests(size_t route_slot, Outcome outcome) const {
    return requests_[route_slot * kOutcomes + static_cast<size_t>(outcome)].load(
        std::memory_order_relaxed);
  }
  uint64_t shadow_violations(size_t route_slot) const {
    return shadow_violations_[route_slot].load(std::memory_order_relaxed);
  }
  const LatencyHistogram& request_duration() const { return request_duration_; }
  const LatencyHistogram& upstream_duration() const { return upstream_duration_; }

 private:
  static void Bump(std::atomic<uint64_t>& a) {
    a.store(a.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }

  size_t route_slots_;
  std::unique_ptr<std::atomic<uint64_t>[]> requests_;           // route_slots_ * kOutcomes
  std::unique_ptr<std::atomic<uint64_t>[]> shadow_violations_;  // route_slots_
  LatencyHistogram request_duration_;
  LatencyHistogram upstream_duration_;
};

}  // namespace fencegate::metrics
