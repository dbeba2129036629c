#pragma once
// LatencyHistogram: a histogram of durations with fixed buckets, counted
// with relaxed atomic integers and read by the metrics endpoint at scrape
// time (metrics/exposition.h). Recording costs a few compares and two
// additions; nothing allocates and no lock is taken.
//
// Two ways to record: Record() for a histogram that one thread writes (a
// worker's shard): a plain load and store, no locked instruction; and
// RecordShared() for one that several threads write (fetch_add). Readers
// (Snapshot) may run on any thread at any time: a scrape during a record
// may see the bucket and the sum of that one sample apart, never a torn
// count.

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace fencegate::metrics {

// What a histogram holds at one moment, ready for the exposition: bucket
// counts (not cumulative), the sample count and the sum in seconds.
struct HistogramSnapshot {
  std::vector<double> bounds;    // upper bounds in seconds, ascending; +Inf not included
  std::vector<uint64_t> counts;  // bounds.size() + 1: the last is above every bound
  uint64_t count = 0;
  double sum_seconds = 0;
};

class LatencyHistogram {
 public:
  using Duration = std::chrono::steady_clock::duration;

  // Upper bounds, in nanoseconds: 100 us to 10 s, about 2.5x apart.
  static constexpr std::array<uint64_t, 16> kBoundsNs = {
      100'000,     250'000,     500'000,       1'000'000,     2'500'000,     5'000'000,
      10'000'000,  25'000'000,  50'000'000,    100'000'000,   250'000'000,   500'000'000,
      1'000'000'000, 2'500'000'000, 5'000'000'000, 10'000'000'000};

  // The bucket a duration falls in: the first bound it does not exceed
  // (kBoundsNs.size() above all of them). A negative duration counts as 0.
  static size_t BucketOf(uint64_t ns) {
    size_t i = 0;
    while (i < kBoundsNs.size() && ns > kBoundsNs[i]) ++i;
    return i;
  }

  // Only one thread may call Record on a histogram (or only one at a time,
  // with an ordering between them).
  void Record(Duration d) {
    const uint64_t ns = Nanos(d);
    Bump(buckets_[BucketOf(ns)], 1);
    Bump(sum_ns_, ns);
  }
  // Any thread, any number of them at once.
  void RecordShared(Duration d) {
    const uint64_t ns = Nanos(d);
    buckets_[BucketOf(ns)].fetch_add(1, std::memory_order_relaxed);
    sum_ns_.fetch_add(ns, std::memory_order_relaxed);
  }

  // Adds this histogram's counts to *out (bounds set on first use), so that
  // the shards of several threads sum into one.
  void AddTo(HistogramSnapshot* out) const;
  HistogramSnapshot Snapshot() const {
    HistogramSnapshot s;
    AddTo(&s);
    return s;
  }

 private:
  static uint64_t Nanos(Duration d) {
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
    return ns > 0 ? static_cast<uint64_t>(ns) : 0;
  }
  // One writer: no read-modify-write instruction needed.
  static void Bump(std::atomic<uint64_t>& a, uint64_t n) {
    a.store(a.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }

  std::array<std::atomic<uint64_t>, kBoundsNs.size() + 1> buckets_{};
  std::atomic<uint64_t> sum_ns_{0};
};

}  // namespace fencegate::metrics
