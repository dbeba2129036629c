#include "admin/idempotency_answer.h"

namespace fencegate::proxy {

using nlohmann::json;

json IdempotencyCountersJson(const IdempotencyCounters& counters) {
  auto get = [](const std::atomic<uint64_t>& n) { return n.load(std::memory_order_relaxed); };
  return {
      {"executions", get(counters.executions)},   {"replays", get(counters.replays)},
      {"mismatches", get(counters.mismatches)},   {"conflicts", get(counters.conflicts)},
      {"waits", get(counters.waits)},             {"expirations", get(counters.expirations)},
      {"releases", get(counters.releases)},       {"not_kept", get(counters.not_kept)},
      {"store_errors", get(counters.store_errors)},
  };
}

json IdempotencyRecordJson(std::string_view route, std::string_view key, bool scoped,
                           const storage::IdempotencyRecord& record) {
  const bool finished = record.state == storage::IdempotencyRecord::State::kFinished;
  json body = {
      {"route", route},
      {"key", key},
      {"scoped", scoped},
      {"state", finished ? "finished" : "reserved"},
      {"created_ms", record.created_ms},
      {"expires_ms", record.expires_ms},
      // The body's digest is known once the first request's body was read
      // whole: null while reserved.
      {"fingerprint",
       {{"head", HexOf(record.head_digest)},
        {"body", record.body_digest.empty() ? json(nullptr) : json(HexOf(record.body_digest))}}},
  };
  if (finished) {
    const storage::StoredResponse& response = record.response;
    json names = json::array();
    for (const auto& header : response.headers) names.push_back(header.first);
    body["response"] = {
        {"status", response.status},
        {"body_bytes", response.body_bytes},
        {"body_kept", response.body_kept},
        {"header_names", std::move(names)},
    };
  }
  return body;
}

}  // namespace fencegate::proxy
