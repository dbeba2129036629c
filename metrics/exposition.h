#pragma once
// Exposition: the metrics endpoint's collector (docs/contract.md,
// "Metrics"). A prometheus::Collectable that builds every metric family at
// scrape time from sources the server wires in: each source reads counters
// that the code it watches keeps as relaxed atomics (RequestShard,
// LatencyHistogram, the store's and the pool's counters) and appends
// families. Nothing is registered per request, and nothing on a request's
// way takes a lock for it.
//
// Thread-safe once the sources are added: Collect and Text may run on any
// thread. Add sources before the first scrape.

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "metrics/histogram.h"
#include "metrics/request_metrics.h"

namespace fencegate::metrics {

using Families = std::vector<prometheus::MetricFamily>;
using Labels = std::vector<std::pair<std::string, std::string>>;

class Exposition : public prometheus::Collectable {
 public:
  using Source = std::function<void(Families*)>;

  void Add(Source source) { sources_.push_back(std::move(source)); }
  std::vector<prometheus::MetricFamily> Collect() const override;
  // The text exposition format 0.0.4 (Content-Type
  // "text/plain; version=0.0.4; charset=utf-8").
  std::string Text() const;

 private:
  std::vector<Source> sources_;
};

// Builders for sources. Each appends one family with one sample (a family
// already in *out with the same name gets the sample added instead).
void AddCounter(Families* out, std::string_view name, std::string_view help, double value,
                const Labels& labels = {});
void AddGauge(Families* out, std::string_view name, std::string_view help, double value,
              const Labels& labels = {});
void AddHistogram(Families* out, std::string_view name, std::string_view help,
                  const HistogramSnapshot& snapshot);
// A summary without quantiles: a sum and a count (the store's batch sizes).
void AddSumCount(Families* out, std::string_view name, std::string_view help, double sum,
                 uint64_t count);

// The data plane's families, summed over the I/O threads' shards:
// fencegate_requests_total{route,outcome} (every route and outcome, zeros
// included, so that a rate exists before the first event),
// fencegate_shadow_violations_total{route} (the shadow routes),
// fencegate_request_duration_seconds and fencegate_upstream_duration_seconds.
// `route_names[i]` names route slot i + 1 (RequestShard); the slot of a
// request no route matched is the route "".
void AddRequestFamilies(Families* out, std::span<const std::string> route_names,
                        const std::vector<bool>& shadow_routes,
                        std::span<const RequestShard* const> shards);

// The process's own figures, as Prometheus clients name them, read from
// /proc: process_cpu_seconds_total, process_resident_memory_bytes,
// process_virtual_memory_bytes, process_open_fds, process_max_fds,
// process_start_time_seconds. A figure that cannot be read is left out.
void AddProcessFamilies(Families* out);

}  // namespace fencegate::metrics
