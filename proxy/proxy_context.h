#pragma once
// What every session of the data plane shares: the live configuration
// (config, router and fence settings, swapped whole on reload), the fence
// filter, and process-wide counters. One per server; each
// worker thread adds its own io_context and upstream pool (Worker).

#include <atomic>
#include <cstdint>
#include <memory>
#include <unordered_set>
#include <vector>

#include "config/config.h"
#include "fence/fence_filter.h"
#include "fence/router.h"
#include "metrics/request_metrics.h"
#include "net/client_limit.h"
#include "net/deadline.h"
#include "proxy/held_keys.h"
#include "proxy/idempotency_gate.h"
#include "proxy/live_config.h"
#include "proxy/refusal_log.h"
#include "proxy/upstream_pool.h"
#include "storage/idempotency_store.h"

namespace fencegate::proxy {

struct Worker;

struct ProxyContext {
  LiveConfig live;  // set before the first connection
  std::shared_ptr<boost::asio::ssl::context> listener_tls;  // nullptr: plain HTTP listener
  FenceFilter* fence = nullptr;
  // The store's idempotency records (nullptr: the engine keeps none, and
  // no route may have `idempotency:`).
  storage::IdempotencyStore* idempotency = nullptr;
  IdempotencyCounters idempotency_counters;
  HeldKeys held_keys;  // the idempotency keys this process holds

  std::atomic<bool> draining{false};         // SIGTERM: finish current requests, then close
  std::atomic<int64_t> active_connections{0};
  std::atomic<int64_t> requests_in_flight{0};
  std::unique_ptr<ClientLimiter> clients;  // limits.max_connections_per_client
  RefusalLimiter refusals;                 // the refusal log's lines per second
  // Every I/O thread's Worker, in order; set before the first connection.
  // A session moves to the Worker of a key its writes wait for
  // (SessionAffinity).
  std::vector<Worker*> workers;
};

class HttpSession;

// Closes the streams of `worker`'s sessions whose deadline has passed
// (HttpSession::Sweep); false when the worker has no session left to watch.
// Defined with HttpSession.
bool SweepSessions(Worker& worker, Deadline::Clock::time_point now);

// The sweep period of the data plane's timeouts (deadline.h).
inline std::chrono::milliseconds SessionSweepInterval(const config::Config& config) {
  return SweepInterval({config.limits.header_timeout, config.limits.idle_timeout,
                        config.upstream.timeout});
}

// Per worker thread: its io_context, its upstream pool, its sessions and
// their timeouts' sweep, and what its requests counted. Only the worker's
// own thread touches these (no locks needed); the metrics endpoint reads the
// counters, which are relaxed atomics.
struct Worker {
  boost::asio::io_context& ioc;
  UpstreamPool pool;
  std::unordered_set<HttpSession*> sessions;  // live sessions, for draining and the sweep
  DeadlineSweep sweep;                        // started by a session, stops when none is left
  metrics::RequestShard metrics;              // one per metrics::RouteSlots slot
  Worker(boost::asio::io_context& io, const config::Config& config,
         boost::asio::ssl::context* upstream_tls = nullptr)
      : ioc(io),
        pool(io, config.upstream, upstream_tls),
        sweep(io, SessionSweepInterval(config),
              [this](Deadline::Clock::time_point now) { return SweepSessions(*this, now); }),
        metrics(metrics::RouteSlots::kMaxRoutes) {}
};

}  // namespace fencegate::proxy
