// RocksDbStore under concurrent callers: per-key atomicity checked against a
// sequential model, group commit, and decisions inside one batch.

#include <atomic>
#include <cstdint>
#include <future>
#include <latch>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "storage/rocksdb_store.h"
#include "tests/storage/test_util.h"

namespace fencegate::storage {
namespace {

using testing::GetSync;
using testing::OpenRocks;
using testing::TempDir;

// Parks the writer thread inside a handler so that everything enqueued
// meanwhile is decided in the next batch. Release() lets it go.
class WriterParker {
 public:
  explicit WriterParker(TokenStore& store)
      : released_(release_.get_future().share()) {
    store.Advance("parker", 1, [this, released = released_](const Status&,
                                                            Fence) {
      entered_.set_value();
      released.wait();
    });
    entered_.get_future().wait();
  }
  ~WriterParker() { Release(); }
  void Release() {
    if (!released_called_) release_.set_value();
    released_called_ = true;
  }

 private:
  std::promise<void> entered_;
  std::promise<void> release_;
  std::shared_future<void> released_;
  bool released_called_ = false;
};

struct Event {
  bool raise = false;
  uint64_t token = 0;
  Status status;
  Fence fence;
};

// Under async durability callers decide on their own threads whenever the
// store is idle, and the writer takes the rest: the model must hold across
// both.
class RocksDbStoreAtomicityTest : public ::testing::TestWithParam<Durability> {};

TEST_P(RocksDbStoreAtomicityTest, AdvanceIsAtomicPerKey) {
  constexpr int kThreads = 8;
  constexpr int kPerThread = 1500;
  constexpr int kKeys = 4;
  TempDir dir;
  auto store = OpenRocks(dir.path(), GetParam());
  ASSERT_NE(store, nullptr);

  // Handlers append here in completion order, which is the order of the
  // decisions (rocksdb_store.h); the mutex only makes the recording safe.
  std::mutex mu;
  std::vector<Event> events[kKeys];
  std::latch done(kThreads * kPerThread);
  std::latch start(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(1000 + t);
      start.arrive_and_wait();
      for (int i = 0; i < kPerThread; ++i) {
        int k = static_cast<int>(rng() % kKeys);
        // Mostly rising tokens with jitter, so both outcomes are frequent.
        uint64_t token = static_cast<uint64_t>(i) * 4 + rng() % 64;
        bool raise = rng() % 16 == 0;
        auto handler = [&, k, token, raise](const Status& s, Fence f) {
          {
            std::lock_guard<std::mutex> lock(mu);
            events[k].push_back(Event{raise, token, s, f});
          }
          done.count_down();
        };
        std::string key = "/shared/" + std::to_string(k);
        if (raise) {
          store->Raise(key, token, handler);
        } else {
          store->Advance(key, token, handler);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  done.wait();

  int accepted = 0, refused = 0;
  std::lock_guard<std::mutex> lock(mu);
  for (int k = 0; k < kKeys; ++k) {
    // Replay against the sequential model: one stored max per key.
    bool present = false;
    uint64_t max = 0;
    uint64_t last_accepted = 0;
    for (const Event& e : events[k]) {
      ASSERT_TRUE(e.status.ok()) << e.status.ToString();
      bool should_accept = e.raise || !present || e.token >= max;
      ASSERT_EQ(e.fence.accepted, should_accept)
          << "key " << k << " token " << e.token << " stored max " << max;
      if (should_accept) {
        max = present ? std::max(max, e.token) : e.token;
        present = true;
        if (!e.raise) {
          EXPECT_GE(e.token, last_accepted) << "accepted tokens went down";
          last_accepted = e.token;
          ++accepted;
        }
      } else {
        EXPECT_LT(e.token, e.fence.current) << "refused a token >= current";
        ++refused;
      }
      ASSERT_EQ(e.fence.current, max) << "key " << k;
    }
    auto g = GetSync(*store, "/shared/" + std::to_string(k));
    ASSERT_TRUE(g.status.ok());
    EXPECT_EQ(g.value, present ? std::optional<uint64_t>(max) : std::nullopt);
  }
  EXPECT_GT(accepted, 0);
  EXPECT_GT(refused, 0);  // otherwise the test did not exercise refusals
  // Every request was decided exactly once.
  EXPECT_EQ(store->stats().requests, uint64_t{kThreads * kPerThread});
  if (GetParam() == Durability::kAsync) {
    EXPECT_GT(store->stats().caller_decided, 0u);
  } else {
    EXPECT_EQ(store->stats().caller_decided, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Durabilities, RocksDbStoreAtomicityTest,
                         ::testing::Values(Durability::kSync, Durability::kAsync),
                         [](const auto& info) {
                           return info.param == Durability::kSync ? "Sync" : "Async";
                         });

// Under async durability, writes decided on the callers' threads and the
// writer's: a key read over and over by the reader thread never goes back
// to an older token, and ends at the last one written.
TEST(RocksDbStoreConcurrencyTest, ReadsDuringAsyncWritesNeverGoBack) {
  constexpr int kWriters = 2;
  constexpr int kKeys = 8;
  constexpr uint64_t kRounds = 400;
  TempDir dir;
  RocksDbStoreOptions options;
  options.path = dir.path();
  options.durability = Durability::kAsync;
  std::unique_ptr<RocksDbStore> store;
  ASSERT_TRUE(RocksDbStore::Open(options, &store).ok());
  auto key = [](int w, int k) { return "/r/" + std::to_string(w) + "/" + std::to_string(k); };

  std::atomic<bool> writing{true};
  std::latch decided(kWriters * kKeys * kRounds);
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      for (uint64_t round = 1; round <= kRounds; ++round) {
        for (int k = 0; k < kKeys; ++k) {
          store->Advance(key(w, k), round, [&decided](const Status& s, Fence f) {
            EXPECT_TRUE(s.ok() && f.accepted) << s.ToString();
            decided.count_down();
          });
        }
      }
    });
  }
  std::thread reader([&] {
    std::vector<uint64_t> seen(kWriters * kKeys, 0);
    while (writing.load()) {
      for (int w = 0; w < kWriters; ++w) {
        for (int k = 0; k < kKeys; ++k) {
          auto g = GetSync(*store, key(w, k));
          ASSERT_TRUE(g.status.ok()) << g.status.ToString();
          const uint64_t now = g.value.value_or(0);
          ASSERT_GE(now, seen[w * kKeys + k]) << key(w, k) << " went back";
          ASSERT_LE(now, kRounds);
          seen[w * kKeys + k] = now;
        }
      }
    }
  });
  for (auto& t : writers) t.join();
  decided.wait();
  writing = false;
  reader.join();
  for (int w = 0; w < kWriters; ++w) {
    for (int k = 0; k < kKeys; ++k) {
      EXPECT_EQ(GetSync(*store, key(w, k)).value, std::optional<uint64_t>(kRounds)) << key(w, k);
    }
  }
  EXPECT_GT(store->stats().db_writes, 0u);
  ASSERT_TRUE(store->Close().ok());
}

TEST(RocksDbStoreConcurrencyTest, ConcurrentAdvancesShareOneSync) {
  constexpr int kThreads = 8;
  constexpr int kPerThread = 8;  // 64 in flight, distinct keys
  TempDir dir;
  auto store = OpenRocks(dir.path(), Durability::kSync);
  ASSERT_NE(store, nullptr);

  WriterParker parker(*store);  // batch 1: the parker's own advance
  std::latch done(kThreads * kPerThread);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        store->Advance("/k/" + std::to_string(t) + "/" + std::to_string(i), 1,
                       [&](const Status& s, Fence f) {
                         EXPECT_TRUE(s.ok() && f.accepted);
                         done.count_down();
                       });
      }
    });
  }
  for (auto& th : threads) th.join();  // all 64 are queued now
  parker.Release();
  done.wait();

  StoreStats s = store->stats();
  EXPECT_EQ(s.writes, 65u);
  EXPECT_LT(s.syncs, s.writes) << "no group commit";
  EXPECT_EQ(s.syncs, 2u);  // the parker's batch and the 64 together
  EXPECT_EQ(s.batches, 2u);
}

TEST(RocksDbStoreConcurrencyTest, SameBatchSeesEarlierDecisions) {
  TempDir dir;
  auto store = OpenRocks(dir.path(), Durability::kSync);
  ASSERT_NE(store, nullptr);

  struct Step {
    bool raise;
    uint64_t token;
    bool accepted;
    uint64_t current;
  };
  const std::vector<Step> steps = {
      {false, 5, true, 5}, {false, 3, false, 5}, {false, 5, true, 5},
      {true, 4, true, 5},  {false, 7, true, 7},  {false, 6, false, 7},
      {true, 9, true, 9},  {false, 8, false, 9},
  };
  std::vector<std::promise<std::pair<Status, Fence>>> results(steps.size());
  {
    WriterParker parker(*store);
    for (size_t i = 0; i < steps.size(); ++i) {
      auto handler = [&results, i](const Status& s, Fence f) {
        results[i].set_value({s, f});
      };
      if (steps[i].raise) {
        store->Raise("k", steps[i].token, handler);
      } else {
        store->Advance("k", steps[i].token, handler);
      }
    }
  }
  for (size_t i = 0; i < steps.size(); ++i) {
    auto [s, f] = results[i].get_future().get();
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(f.accepted, steps[i].accepted) << "step " << i;
    EXPECT_EQ(f.current, steps[i].current) << "step " << i;
  }
  StoreStats s = store->stats();
  EXPECT_EQ(s.batches, 2u) << "steps were not decided in one batch";
  EXPECT_EQ(s.syncs, 2u);
  EXPECT_EQ(GetSync(*store, "k").value, 9u);
}

TEST(RocksDbStoreConcurrencyTest, MaxBatchBoundsABatch) {
  TempDir dir;
  RocksDbStoreOptions options;
  options.path = dir.path();
  options.max_batch = 10;
  std::unique_ptr<RocksDbStore> store;
  ASSERT_TRUE(RocksDbStore::Open(options, &store).ok());
  std::latch done(35);
  {
    WriterParker parker(*store);
    for (int i = 0; i < 35; ++i) {
      store->Advance("k" + std::to_string(i), 1,
                     [&](const Status&, Fence) { done.count_down(); });
    }
  }
  done.wait();
  EXPECT_EQ(store->stats().batches, 1u + 4u);  // parker + 10+10+10+5
}

TEST(RocksDbStoreConcurrencyTest, FullQueueAnswersUnavailable) {
  TempDir dir;
  RocksDbStoreOptions options;
  options.path = dir.path();
  options.max_queued = 3;
  std::unique_ptr<RocksDbStore> store;
  ASSERT_TRUE(RocksDbStore::Open(options, &store).ok());
  std::latch done(3);
  Status overflow;
  {
    WriterParker parker(*store);
    for (int i = 0; i < 3; ++i) {
      store->Advance("k", i, [&](const Status& s, Fence) {
        EXPECT_TRUE(s.ok());
        done.count_down();
      });
    }
    store->Advance("k", 9, [&](const Status& s, Fence) { overflow = s; });
    EXPECT_EQ(overflow.code(), Status::Code::kUnavailable);
  }
  done.wait();
  EXPECT_EQ(GetSync(*store, "k").value, 2u);
}

}  // namespace
}  // namespace fencegate::storage
