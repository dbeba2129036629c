#include "metrics/request_metrics.h"

namespace fencegate::metrics {

namespace {
constexpr std::array<std::string_view, kOutcomes> kNames = {
    "forwarded",
    "stale",
    "token_required",
    "bad_request",
    "store_unavailable",
    "upstream_error",
    "overloaded",
    "expired",
    "replayed",
    "idempotency_mismatch",
    "idempotency_in_flight",
    "idempotency_response_not_kept",
    "client_error",
    "nested_keys",
    "key_moving",
};
}  // namespace

std::string_view OutcomeName(Outcome outcome) { return kNames[static_cast<size_t>(outcome)]; }

std::optional<Outcome> OutcomeOf(std::string_view name) {
  for (size_t i = 0; i < kNames.size(); ++i) {
    if (kNames[i] == name) return static_cast<Outcome>(i);
  }
  return std::nullopt;
}

RequestShard::RequestShard(size_t routes)
    : route_slots_(routes + 1),
      requests_(new std::atomic<uint64_t>[route_slots_ * kOutcomes]()),
      shadow_violations_(new std::atomic<uint64_t>[route_slots_]()) {}

void LatencyHistogram::AddTo(HistogramSnapshot* out) const {
  if (out->bounds.empty()) {
    for (uint64_t ns : kBoundsNs) out->bounds.push_back(static_cast<double>(ns) / 1e9);
    out->counts.assign(kBoundsNs.size() + 1, 0);
  }
  for (size_t i = 0; i < buckets_.size(); ++i) {
    const uint64_t n = buckets_[i].load(std::memory_order_relaxed);
    out->counts[i] += n;
    out->count += n;
  }
  out->sum_seconds += static_cast<double>(sum_ns_.load(std::memory_order_relaxed)) / 1e9;
}

}  // namespace fencegate::metrics
