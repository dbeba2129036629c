#pragma once
// The admin listener's answers about idempotency keys (docs/contract.md,
// "Admin API"): what the gates counted, and what the store keeps for one
// key. A record's answer has its state, times and fingerprint, and of a
// stored response its status, size and header names: never the body or a
// header's value, which may hold private data.

#include <nlohmann/json.hpp>
#include <string_view>

#include "fence/idempotency_key.h"
#include "storage/idempotency_record.h"

namespace fencegate::proxy {

// {"executions":N,"replays":N,...}, one member per counter.
nlohmann::json IdempotencyCountersJson(const IdempotencyCounters& counters);

// {"route","key","scoped","state","created_ms","expires_ms","fingerprint",
// and for a finished record "response"}. `scoped`: the record was looked up
// with a scope.
nlohmann::json IdempotencyRecordJson(std::string_view route, std::string_view key, bool scoped,
                                     const storage::IdempotencyRecord& record);

}  // namespace fencegate::proxy
