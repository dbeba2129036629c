#include "metrics/exposition.h"

#include <prometheus/text_serializer.h>

#include <algorithm>
#include <limits>

namespace fencegate::metrics {

namespace {

prometheus::MetricFamily& FamilyIn(Families* out, std::string_view name, std::string_view help,
                                   prometheus::MetricType type) {
  auto it = std::find_if(out->begin(), out->end(),
                         [&](const prometheus::MetricFamily& f) { return f.name == name; });
  if (it != out->end()) return *it;
  out->push_back({std::string(name), std::string(help), type, {}});
  return out->back();
}

prometheus::ClientMetric& SampleIn(prometheus::MetricFamily& family, const Labels& labels) {
  prometheus::ClientMetric& m = family.metric.emplace_back();
  for (const auto& [name, value] : labels) m.label.push_back({name, value});
  return m;
}

}  // namespace

std::vector<prometheus::MetricFamily> Exposition::Collect() const {
  Families out;
  for (const Source& source : sources_) source(&out);
  return out;
}

std::string Exposition::Text() const { return prometheus::TextSerializer().Serialize(Collect()); }

void AddCounter(Families* out, std::string_view name, std::string_view help, double value,
                const Labels& labels) {
  auto& family = FamilyIn(out, name, help, prometheus::MetricType::Counter);
  SampleIn(family, labels).counter.value = value;
}

void AddGauge(Families* out, std::string_view name, std::string_view help, double value,
              const Labels& labels) {
  auto& family = FamilyIn(out, name, help, prometheus::MetricType::Gauge);
  SampleIn(family, labels).gauge.value = value;
}

void AddHistogram(Families* out, std::string_view name, std::string_view help,
                  const HistogramSnapshot& snapshot) {
  auto& family = FamilyIn(out, name, help, prometheus::MetricType::Histogram);
  auto& h = SampleIn(family, {}).histogram;
  h.sample_count = snapshot.count;
  h.sample_sum = snapshot.sum_seconds;
  uint64_t cumulative = 0;
  for (size_t i = 0; i < snapshot.counts.size(); ++i) {
    cumulative += snapshot.counts[i];
    h.bucket.push_back({cumulative, i < snapshot.bounds.size()
                                        ? snapshot.bounds[i]
                                        : std::numeric_limits<double>::infinity()});
  }
}

void AddSumCount(Families* out, std::string_view name, std::string_view help, double sum,
                 uint64_t count) {
  auto& family = FamilyIn(out, name, help, prometheus::MetricType::Summary);
  auto& s = SampleIn(family, {}).summary;
  s.sample_sum = sum;
  s.sample_count = count;
}

void AddRequestFamilies(Families* out, std::span<const std::string> route_names,
                        const std::vector<bool>& shadow_routes,
                        std::span<const RequestShard* const> shards) {
  const size_t slots = route_names.size() + 1;
  auto route_of = [&](size_t slot) { return slot == 0 ? std::string() : route_names[slot - 1]; };
  auto& requests = FamilyIn(out, "fencegate_requests_total",
                            "Requests by route (\"\": no route matched) and outcome.",
                            prometheus::MetricType::Counter);
  for (size_t slot = 0; slot < slots; ++slot) {
    for (size_t o = 0; o < kOutcomes; ++o) {
      uint64_t n = 0;
      for (const RequestShard* shard : shards) {
        if (slot < shard->route_slots()) n += shard->requests(slot, static_cast<Outcome>(o));
      }
      SampleIn(requests, {{"route", route_of(slot)},
                          {"outcome", std::string(OutcomeName(static_cast<Outcome>(o)))}})
          .counter.value = static_cast<double>(n);
    }
  }
  auto& shadow = FamilyIn(out, "fencegate_shadow_violations_total",
                          "Writes a shadow route forwarded that enforce would have refused.",
                          prometheus::MetricType::Counter);
  for (size_t slot = 1; slot < slots; ++slot) {
    if (slot - 1 >= shadow_routes.size() || !shadow_routes[slot - 1]) continue;
    uint64_t n = 0;
    for (const RequestShard* shard : shards) {
      if (slot < shard->route_slots()) n += shard->shadow_violations(slot);
    }
    SampleIn(shadow, {{"route", route_of(slot)}}).counter.value = static_cast<double>(n);
  }
  HistogramSnapshot total;
  HistogramSnapshot upstream;
  for (const RequestShard* shard : shards) {
    shard->request_duration().AddTo(&total);
    shard->upstream_duration().AddTo(&upstream);
  }
  if (shards.empty()) {
    total = LatencyHistogram().Snapshot();
    upstream = total;
  }
  AddHistogram(out, "fencegate_request_duration_seconds",
               "Time from a request's head to the end of its response.", total);
  AddHistogram(out, "fencegate_upstream_duration_seconds",
               "Time of a request's exchange with the backend.", upstream);
}

}  // namespace fencegate::metrics
