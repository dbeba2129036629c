#include "metrics/exposition.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <ctime>
#include <string>
#include <vector>

namespace fencegate::metrics {
namespace {

using std::chrono::milliseconds;

const prometheus::MetricFamily* Find(const Families& families, const std::string& name) {
  for (const auto& f : families) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

std::string Label(const prometheus::ClientMetric& m, const std::string& name) {
  for (const auto& l : m.label) {
    if (l.name == name) return l.value;
  }
  return "<absent>";
}

double RequestsOf(const Families& families, const std::string& route, const std::string& outcome) {
  const auto* f = Find(families, "fencegate_requests_total");
  if (f == nullptr) return -1;
  for (const auto& m : f->metric) {
    if (Label(m, "route") == route && Label(m, "outcome") == outcome) return m.counter.value;
  }
  return -1;
}

TEST(ExpositionTest, RequestFamiliesSumTheShards) {
  RequestShard a(2);
  RequestShard b(2);
  a.Count(1, Outcome::kForwarded, false, milliseconds(2), milliseconds(1));
  b.Count(1, Outcome::kForwarded, false, milliseconds(2), milliseconds(1));
  b.Count(2, Outcome::kStale, true, milliseconds(2), std::nullopt);
  b.Count(0, Outcome::kBadRequest, false, milliseconds(2), std::nullopt);
  std::vector<std::string> names = {"objects", "shadowed"};
  std::vector<bool> shadow = {false, true};
  std::vector<const RequestShard*> shards = {&a, &b};
  Families out;
  AddRequestFamilies(&out, names, shadow, shards);

  EXPECT_EQ(RequestsOf(out, "objects", "forwarded"), 2);
  EXPECT_EQ(RequestsOf(out, "shadowed", "stale"), 1);
  EXPECT_EQ(RequestsOf(out, "", "bad_request"), 1);
  EXPECT_EQ(RequestsOf(out, "objects", "stale"), 0);  // zeros are there too
  const auto* requests = Find(out, "fencegate_requests_total");
  ASSERT_NE(requests, nullptr);
  EXPECT_EQ(requests->type, prometheus::MetricType::Counter);
  EXPECT_EQ(requests->metric.size(), 3 * kOutcomes);

  const auto* shadowed = Find(out, "fencegate_shadow_violations_total");
  ASSERT_NE(shadowed, nullptr);
  ASSERT_EQ(shadowed->metric.size(), 1u);  // the shadow route only
  EXPECT_EQ(Label(shadowed->metric[0], "route"), "shadowed");
  EXPECT_EQ(shadowed->metric[0].counter.value, 1);

  const auto* total = Find(out, "fencegate_request_duration_seconds");
  ASSERT_NE(total, nullptr);
  EXPECT_EQ(total->type, prometheus::MetricType::Histogram);
  const auto& h = total->metric.at(0).histogram;
  EXPECT_EQ(h.sample_count, 4u);
  EXPECT_NEAR(h.sample_sum, 0.008, 1e-12);
  ASSERT_EQ(h.bucket.size(), LatencyHistogram::kBoundsNs.size() + 1);
  EXPECT_EQ(h.bucket.back().cumulative_count, 4u);  // +Inf holds everything
  EXPECT_TRUE(std::isinf(h.bucket.back().upper_bound));
  EXPECT_EQ(h.bucket[4].cumulative_count, 4u);  // le 0.0025 holds 2 ms
  EXPECT_EQ(h.bucket[3].cumulative_count, 0u);  // le 0.001
  const auto* upstream = Find(out, "fencegate_upstream_duration_seconds");
  ASSERT_NE(upstream, nullptr);
  EXPECT_EQ(upstream->metric.at(0).histogram.sample_count, 2u);
}

TEST(ExpositionTest, TextIsTheExpositionFormat) {
  RequestShard shard(1);
  shard.Count(1, Outcome::kForwarded, false, milliseconds(1), std::nullopt);
  std::vector<std::string> names = {"objects"};
  std::vector<bool> shadow = {false};
  Exposition e;
  e.Add([&](Families* out) {
    std::vector<const RequestShard*> shards = {&shard};
    AddRequestFamilies(out, names, shadow, shards);
    AddGauge(out, "fencegate_keys_waiting", "Fenced writes waiting.", 3);
    AddSumCount(out, "fencegate_store_batch_size", "Requests per batch.", 10, 4);
  });
  std::string text = e.Text();
  EXPECT_NE(text.find("# TYPE fencegate_requests_total counter\n"), std::string::npos) << text;
  EXPECT_NE(text.find("fencegate_requests_total{route=\"objects\",outcome=\"forwarded\"} 1\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("# TYPE fencegate_request_duration_seconds histogram\n"),
            std::string::npos);
  EXPECT_NE(text.find("fencegate_request_duration_seconds_bucket{le=\"+Inf\"} 1\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("fencegate_request_duration_seconds_count 1\n"), std::string::npos);
  EXPECT_NE(text.find("fencegate_keys_waiting 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("fencegate_store_batch_size_sum 10\n"), std::string::npos) << text;
  EXPECT_NE(text.find("fencegate_store_batch_size_count 4\n"), std::string::npos) << text;
}

TEST(ExpositionTest, ProcessFamiliesAreRead) {
  Families out;
  AddProcessFamilies(&out);
  for (const char* name : {"process_cpu_seconds_total", "process_resident_memory_bytes",
                           "process_open_fds", "process_start_time_seconds"}) {
    const auto* f = Find(out, name);
    ASSERT_NE(f, nullptr) << name;
    ASSERT_EQ(f->metric.size(), 1u);
  }
  EXPECT_GT(Find(out, "process_resident_memory_bytes")->metric[0].gauge.value, 0);
  EXPECT_GE(Find(out, "process_open_fds")->metric[0].gauge.value, 3);  // stdin, stdout, stderr
  const double start = Find(out, "process_start_time_seconds")->metric[0].gauge.value;
  const double now = std::chrono::duration<double>(
                         std::chrono::system_clock::now().time_since_epoch()).count();
  EXPECT_LE(start, now + 1);
  EXPECT_GT(start, now - 24 * 3600.0 * 365);
}

double CpuSeconds() {
  Families out;
  AddProcessFamilies(&out);
  const auto* f = Find(out, "process_cpu_seconds_total");
  return f == nullptr ? -1 : f->metric[0].counter.value;
}

// Finer than the clock tick (10 ms) of /proc/self/stat: a few milliseconds of
// work show.
TEST(ExpositionTest, CpuTimeCountsMilliseconds) {
  const double before = CpuSeconds();
  timespec start{};
  timespec now{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &start);
  auto ms = [](const timespec& t) {
    return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) / 1e6;
  };
  volatile unsigned spin = 0;
  do {
    for (int i = 0; i < 10000; ++i) spin = spin + 1;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  } while (ms(now) - ms(start) < 4);
  const double after = CpuSeconds();
  EXPECT_GT(before, 0);
  EXPECT_GE(after - before, 0.003) << before << " -> " << after;
}

}  // namespace
}  // namespace fencegate::metrics
