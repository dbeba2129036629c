#include "metrics/request_metrics.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

namespace fencegate::metrics {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;

TEST(OutcomeTest, EveryNameRoundTrips) {
  for (size_t i = 0; i < kOutcomes; ++i) {
    auto outcome = static_cast<Outcome>(i);
    std::optional<Outcome> back = OutcomeOf(OutcomeName(outcome));
    ASSERT_TRUE(back.has_value()) << OutcomeName(outcome);
    EXPECT_EQ(*back, outcome);
  }
}

TEST(OutcomeTest, TheContractsSixComeFirst) {
  const char* contract[] = {"forwarded",   "stale",
                            "token_required", "bad_request",
                            "store_unavailable", "upstream_error"};
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(OutcomeName(static_cast<Outcome>(i)), contract[i]);
}

TEST(OutcomeTest, UnknownNamesAreNotCounted) {
  EXPECT_FALSE(OutcomeOf("").has_value());
  EXPECT_FALSE(OutcomeOf("Forwarded").has_value());
  EXPECT_FALSE(OutcomeOf("/objects/a").has_value());
}

TEST(LatencyHistogramTest, BucketsAreUpperBoundsInclusive) {
  EXPECT_EQ(LatencyHistogram::BucketOf(0), 0u);
  EXPECT_EQ(LatencyHistogram::BucketOf(100'000), 0u);  // exactly 100 us: le="0.0001"
  EXPECT_EQ(LatencyHistogram::BucketOf(100'001), 1u);
  EXPECT_EQ(LatencyHistogram::BucketOf(10'000'000'000), LatencyHistogram::kBoundsNs.size() - 1);
  EXPECT_EQ(LatencyHistogram::BucketOf(10'000'000'001), LatencyHistogram::kBoundsNs.size());
}

TEST(LatencyHistogramTest, SnapshotHoldsCountsAndSum) {
  LatencyHistogram h;
  h.Record(microseconds(50));   // bucket 0
  h.Record(milliseconds(3));    // le 0.005: bucket 5
  h.Record(std::chrono::seconds(20));  // above every bound
  h.Record(std::chrono::nanoseconds(-5));  // counts as 0
  HistogramSnapshot s = h.Snapshot();
  ASSERT_EQ(s.bounds.size(), LatencyHistogram::kBoundsNs.size());
  ASSERT_EQ(s.counts.size(), s.bounds.size() + 1);
  EXPECT_DOUBLE_EQ(s.bounds[0], 0.0001);
  EXPECT_DOUBLE_EQ(s.bounds.back(), 10.0);
  EXPECT_EQ(s.count, 4u);
  EXPECT_EQ(s.counts[0], 2u);
  EXPECT_EQ(s.counts[5], 1u);
  EXPECT_EQ(s.counts.back(), 1u);
  EXPECT_NEAR(s.sum_seconds, 20.00305, 1e-9);
}

TEST(LatencyHistogramTest, SharedRecordsFromManyThreadsAllCount) {
  LatencyHistogram h;
  constexpr int kThreads = 4;
  constexpr int kEach = 20000;
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kEach; ++i) h.RecordShared(microseconds(200));
    });
  }
  for (auto& t : threads) t.join();
  HistogramSnapshot s = h.Snapshot();
  const auto want = static_cast<uint64_t>(kThreads) * kEach;
  EXPECT_EQ(s.count, want);
  EXPECT_EQ(s.counts[1], want);
  EXPECT_NEAR(s.sum_seconds, kThreads * kEach * 0.0002, 1e-6);
}

TEST(RequestShardTest, CountsByRouteAndOutcome) {
  RequestShard shard(2);
  ASSERT_EQ(shard.route_slots(), 3u);
  shard.Count(1, Outcome::kForwarded, false, milliseconds(1), milliseconds(1));
  shard.Count(1, Outcome::kForwarded, false, milliseconds(1), std::nullopt);
  shard.Count(2, Outcome::kStale, true, milliseconds(1), std::nullopt);
  shard.Count(0, Outcome::kBadRequest, false, microseconds(10), std::nullopt);
  EXPECT_EQ(shard.requests(1, Outcome::kForwarded), 2u);
  EXPECT_EQ(shard.requests(2, Outcome::kStale), 1u);
  EXPECT_EQ(shard.requests(0, Outcome::kBadRequest), 1u);
  EXPECT_EQ(shard.requests(2, Outcome::kForwarded), 0u);
  EXPECT_EQ(shard.shadow_violations(2), 1u);
  EXPECT_EQ(shard.shadow_violations(1), 0u);
  EXPECT_EQ(shard.request_duration().Snapshot().count, 4u);
  EXPECT_EQ(shard.upstream_duration().Snapshot().count, 1u);
}

// One writer thread per shard while another thread reads: the reader sees
// counts that only grow, and the final count is exact.
TEST(RequestShardTest, ReadsWhileOneThreadWrites) {
  RequestShard shard(1);
  constexpr uint64_t kRequests = 100000;
  std::thread writer([&] {
    for (uint64_t i = 0; i < kRequests; ++i) {
      shard.Count(1, Outcome::kForwarded, false, microseconds(1), microseconds(1));
    }
  });
  uint64_t last = 0;
  while (last < kRequests) {
    uint64_t now = shard.requests(1, Outcome::kForwarded);
    ASSERT_GE(now, last);
    last = now;
  }
  writer.join();
  EXPECT_EQ(shard.requests(1, Outcome::kForwarded), kRequests);
}

}  // namespace
}  // namespace fencegate::metrics
