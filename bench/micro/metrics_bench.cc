// What counting one request costs the data plane (metrics/request_metrics.h):
// the end of a request as the session counts it, one thread per shard, and
// beside it the alternatives: the same counts through prometheus-cpp's own
// Counter and Histogram, and a histogram that every thread shares. With
// threads, each benchmark thread counts into its own shard (as the I/O
// threads do) or, for the shared variants, into one.
//
//   build-dir/bench/micro/metrics_bench [--benchmark_filter=Shard]

#include <benchmark/benchmark.h>
#include <prometheus/counter.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "metrics/request_metrics.h"

namespace {

using namespace fencegate::metrics;
using Clock = std::chrono::steady_clock;

constexpr size_t kRoutes = 4;
constexpr size_t kMaxThreads = 8;

// The session's whole count at the end of a request: the clock read, the
// outcome's name looked up, the route's slot and outcome counted, both
// durations recorded.
void BM_ShardCountRequest(benchmark::State& state) {
  static std::vector<std::unique_ptr<RequestShard>> shards = [] {
    std::vector<std::unique_ptr<RequestShard>> v;
    for (size_t i = 0; i < kMaxThreads; ++i) v.push_back(std::make_unique<RequestShard>(kRoutes));
    return v;
  }();
  RequestShard& shard = *shards[state.thread_index()];
  std::string outcome = "forwarded";
  Clock::time_point started = Clock::now();
  for (auto _ : state) {
    Clock::time_point now = Clock::now();
    std::optional<Outcome> o = OutcomeOf(outcome);
    shard.Count(2, *o, false, now - started, std::chrono::microseconds(180));
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_ShardCountRequest)->ThreadRange(1, 2);

// The same without the clock read (what the counters alone cost).
void BM_ShardCountOnly(benchmark::State& state) {
  static std::vector<std::unique_ptr<RequestShard>> shards = [] {
    std::vector<std::unique_ptr<RequestShard>> v;
    for (size_t i = 0; i < kMaxThreads; ++i) v.push_back(std::make_unique<RequestShard>(kRoutes));
    return v;
  }();
  RequestShard& shard = *shards[state.thread_index()];
  for (auto _ : state) {
    shard.Count(2, Outcome::kForwarded, false, std::chrono::microseconds(420),
                std::chrono::microseconds(180));
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_ShardCountOnly)->ThreadRange(1, 2);

// One histogram every thread records into (fetch_add): the store's advance
// duration, recorded on the store's threads.
void BM_SharedHistogram(benchmark::State& state) {
  static LatencyHistogram h;
  for (auto _ : state) {
    h.RecordShared(std::chrono::microseconds(420));
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_SharedHistogram)->ThreadRange(1, 2);

// The alternative: prometheus-cpp's Counter (labels looked up once, as a
// server would) and Histogram, shared by every thread.
void BM_PrometheusCppCounterAndHistograms(benchmark::State& state) {
  static auto registry = std::make_shared<prometheus::Registry>();
  static prometheus::Counter& counter =
      prometheus::BuildCounter().Name("requests_total").Register(*registry).Add(
          {{"route", "objects"}, {"outcome", "forwarded"}});
  static const prometheus::Histogram::BucketBoundaries kBounds = {
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
      0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,     10};
  static auto& family =
      prometheus::BuildHistogram().Name("request_duration_seconds").Register(*registry);
  static prometheus::Histogram& total = family.Add({{"what", "total"}}, kBounds);
  static prometheus::Histogram& upstream = family.Add({{"what", "upstream"}}, kBounds);
  for (auto _ : state) {
    counter.Increment();
    total.Observe(0.00042);
    upstream.Observe(0.00018);
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_PrometheusCppCounterAndHistograms)->ThreadRange(1, 2);

void BM_ClockNow(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(Clock::now());
}
BENCHMARK(BM_ClockNow);

}  // namespace

BENCHMARK_MAIN();
