// The metrics endpoint's sources (docs/contract.md, "Metrics";
// docs/operations.md, "Metrics" lists each family): what the server's parts
// count, read at scrape time. Part of Server, which owns every part read
// here for as long as the admin listener serves.

#include <vector>

#include "app/server.h"
#include "metrics/exposition.h"

namespace fencegate::proxy {

namespace {

double Load(const std::atomic<uint64_t>& a) {
  return static_cast<double>(a.load(std::memory_order_relaxed));
}

void AddStoreFamilies(const storage::StoreCounters& c, metrics::Families* out) {
  metrics::AddCounter(out, "fencegate_store_requests_total",
                      "Write requests the store decided: advances, raises, idempotency records.",
                      static_cast<double>(c.requests));
  metrics::AddSumCount(out, "fencegate_store_batch_size",
                       "Requests per group commit: the sum is the requests, the count the "
                       "batches written together.",
                       static_cast<double>(c.requests), c.batches);
  metrics::AddCounter(out, "fencegate_store_writes_total",
                      "Records the store wrote (accepted changes).", static_cast<double>(c.writes));
  metrics::AddCounter(out, "fencegate_store_write_errors_total",
                      "Store writes that failed; their requests were refused (503).",
                      static_cast<double>(c.write_errors));
  if (c.syncs) {
    metrics::AddCounter(out, "fencegate_store_syncs_total",
                        "Durable writes (WAL fsync) that succeeded.",
                        static_cast<double>(*c.syncs));
  }
  if (c.recoveries) {
    metrics::AddCounter(out, "fencegate_store_recoveries_total",
                        "Times the store recovered from a failed write.",
                        static_cast<double>(*c.recoveries));
  }
  if (c.ownership) {
    const storage::OwnershipCounters& o = *c.ownership;
    metrics::AddGauge(out, "fencegate_keys_owned",
                      "Keys (and collections) this replica owns now (storage.etcd.ownership).",
                      static_cast<double>(o.keys_owned));
    metrics::AddCounter(out, "fencegate_key_takes_total",
                        "Keys this replica took, owned by no replica before.",
                        static_cast<double>(o.takes));
    metrics::AddCounter(out, "fencegate_key_releases_total",
                        "Keys this replica gave up once no write of theirs was left here.",
                        static_cast<double>(o.releases));
    metrics::AddCounter(out, "fencegate_keys_lost_total",
                        "Keys this replica lost with a lease that etcd ended.",
                        static_cast<double>(o.lost));
    metrics::AddCounter(out, "fencegate_key_waits_total",
                        "Writes that waited for another replica to give their key up.",
                        static_cast<double>(o.waits));
  }
}

void AddIdempotencyFamilies(const IdempotencyCounters& c, metrics::Families* out) {
  struct Row {
    const char* name;
    const char* help;
    const std::atomic<uint64_t>& value;
  };
  const Row rows[] = {
      {"fencegate_idempotency_executions_total", "Idempotent writes that ran (reserved a key).",
       c.executions},
      {"fencegate_idempotency_replays_total", "Repeats answered with the stored response.",
       c.replays},
      {"fencegate_idempotency_mismatches_total",
       "Repeats refused with 422: the key with another request.", c.mismatches},
      {"fencegate_idempotency_conflicts_total",
       "Repeats refused with 409: the key's first request still running.", c.conflicts},
      {"fencegate_idempotency_waits_total", "Repeats that waited for the first request to end.",
       c.waits},
      {"fencegate_idempotency_expirations_total",
       "Reservations that replaced an expired record.", c.expirations},
      {"fencegate_idempotency_releases_total", "Reservations given back unrun.", c.releases},
      {"fencegate_idempotency_not_kept_total",
       "Repeats of a response too large to keep (409).", c.not_kept},
      {"fencegate_idempotency_store_errors_total", "Idempotency record calls that failed.",
       c.store_errors},
  };
  for (const Row& r : rows) metrics::AddCounter(out, r.name, r.help, Load(r.value));
}

}  // namespace

void Server::WireMetrics() {
  exposition_.Add([this](metrics::Families* out) {
    std::vector<std::string> names;
    std::vector<bool> shadow;
    route_slots_.Names(&names, &shadow);
    std::vector<const metrics::RequestShard*> shards;
    for (const auto& w : workers_) shards.push_back(&w->metrics);
    metrics::AddRequestFamilies(out, names, shadow, shards);
  });
  exposition_.Add([this](metrics::Families* out) {
    metrics::AddHistogram(out, "fencegate_store_advance_duration_seconds",
                          "Time of a check-and-advance, from the store call to its answer, "
                          "fsync included.",
                          fence_.advance_duration().Snapshot());
    metrics::AddGauge(out, "fencegate_keys_waiting",
                      "Fenced writes waiting for their key's turn.",
                      static_cast<double>(queue_.waiting()));
    metrics::AddGauge(out, "fencegate_connections_active", "Open client connections.",
                      static_cast<double>(ctx_.active_connections.load(std::memory_order_relaxed)));
    metrics::AddGauge(out, "fencegate_requests_in_flight",
                      "Requests whose head was read and whose response has not ended.",
                      static_cast<double>(ctx_.requests_in_flight.load(std::memory_order_relaxed)));
    double opened = 0, failures = 0, reused = 0, dropped = 0;
    for (const auto& w : workers_) {
      const UpstreamPool::Counters& c = w->pool.counters();
      opened += Load(c.opened);
      failures += Load(c.connect_failures);
      reused += Load(c.reused);
      dropped += Load(c.dropped);
    }
    metrics::AddCounter(out, "fencegate_upstream_connections_opened_total",
                        "Connections to the backend opened (TLS handshake included).", opened);
    metrics::AddCounter(out, "fencegate_upstream_connect_failures_total",
                        "Connects to the backend (or TLS handshakes) that failed.", failures);
    metrics::AddCounter(out, "fencegate_upstream_connections_reused_total",
                        "Idle backend connections handed out again.", reused);
    metrics::AddCounter(out, "fencegate_upstream_connections_dropped_total",
                        "Idle backend connections found closed or with stray bytes, and closed.",
                        dropped);
    AddIdempotencyFamilies(ctx_.idempotency_counters, out);
    if (std::optional<storage::StoreCounters> c = store_.Counters()) AddStoreFamilies(*c, out);
  });
  exposition_.Add([](metrics::Families* out) { metrics::AddProcessFamilies(out); });
  admin_ctx_.metrics = [this] { return exposition_.Text(); };
}

}  // namespace fencegate::proxy
