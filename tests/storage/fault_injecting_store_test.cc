// FaultInjectingStore over a real RocksDbStore.

#include "storage/fault_injecting_store.h"

#include <atomic>
#include <chrono>
#include <future>
#include <latch>
#include <mutex>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "storage/rocksdb_store.h"
#include "tests/storage/test_util.h"

namespace fencegate::storage {
namespace {

using namespace std::chrono_literals;
using testing::AdvanceAllSync;
using testing::AdvanceSync;
using testing::GetSync;
using testing::OpenRocks;
using testing::RaiseSync;
using testing::TempDir;

class FaultInjectingStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto base = OpenRocks(dir_.path());
    ASSERT_NE(base, nullptr);
    base_ = base.get();
    store_ = std::make_unique<FaultInjectingStore>(std::move(base));
  }

  TempDir dir_;
  RocksDbStore* base_ = nullptr;  // owned by store_
  std::unique_ptr<FaultInjectingStore> store_;
};

TEST_F(FaultInjectingStoreTest, NoFaultsPassesThrough) {
  EXPECT_TRUE(store_->Health().ok());
  EXPECT_TRUE(AdvanceSync(*store_, "k", 3).fence.accepted);
  EXPECT_FALSE(AdvanceSync(*store_, "k", 2).fence.accepted);
  EXPECT_EQ(RaiseSync(*store_, "k", 8).fence.current, 8u);
  EXPECT_EQ(GetSync(*store_, "k").value, 8u);
}

TEST_F(FaultInjectingStoreTest, IdempotencyRecordsGoThroughTheWrapper) {
  ASSERT_NE(base_->Idempotency(), nullptr);
  EXPECT_EQ(store_->Idempotency(), store_.get()) << "so that faults reach the records too";
}

TEST_F(FaultInjectingStoreTest, FailWritesAnswersIoErrorAndLeavesBaseAlone) {
  ASSERT_TRUE(AdvanceSync(*store_, "k", 5).fence.accepted);
  uint64_t base_requests = base_->stats().requests;

  store_->SetFaults(FaultSpec{.fail_writes = true});
  EXPECT_TRUE(store_->faults().fail_writes);
  auto r = AdvanceSync(*store_, "k", 9);
  EXPECT_EQ(r.status.code(), Status::Code::kIoError);
  r = RaiseSync(*store_, "k", 9);
  EXPECT_EQ(r.status.code(), Status::Code::kIoError);
  r = AdvanceSync(*store_, "new", 1);
  EXPECT_EQ(r.status.code(), Status::Code::kIoError);
  EXPECT_EQ(store_->Health().code(), Status::Code::kIoError);
  EXPECT_EQ(store_->Health().message(), "injected fault");
  EXPECT_EQ(base_->stats().requests, base_requests) << "base was called";
  EXPECT_EQ(GetSync(*store_, "k").value, 5u);  // reads still work

  store_->SetFaults(FaultSpec{});
  EXPECT_TRUE(store_->Health().ok());
  EXPECT_EQ(GetSync(*base_, "k").value, 5u);
  EXPECT_EQ(GetSync(*base_, "new").value, std::nullopt);
  r = AdvanceSync(*store_, "k", 9);  // recovery
  ASSERT_TRUE(r.status.ok());
  EXPECT_TRUE(r.fence.accepted);
  EXPECT_EQ(GetSync(*base_, "k").value, 9u);
}

TEST_F(FaultInjectingStoreTest, FailWritesFailsAWholeBatchOfKeys) {
  ASSERT_TRUE(AdvanceAllSync(*store_, {{"a", 5}, {"b", 5}}).fence.accepted);
  store_->SetFaults(FaultSpec{.fail_writes = true});
  auto r = AdvanceAllSync(*store_, {{"a", 9}, {"b", 9}});
  EXPECT_EQ(r.status.code(), Status::Code::kIoError);
  EXPECT_EQ(GetSync(*base_, "a").value, 5u);
  EXPECT_EQ(GetSync(*base_, "b").value, 5u);
  // A delay keeps the answer, only later.
  store_->SetFaults(FaultSpec{.delay = 20ms});
  r = AdvanceAllSync(*store_, {{"a", 9}, {"b", 4}});
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_FALSE(r.fence.accepted);
  EXPECT_EQ(r.fence.stale, 1u);
  EXPECT_EQ(r.fence.current, (std::vector<uint64_t>{5, 5}));
  store_->SetFaults(FaultSpec{});
  r = AdvanceAllSync(*store_, {{"a", 9}, {"b", 9}});
  EXPECT_TRUE(r.fence.accepted);
  EXPECT_EQ(GetSync(*base_, "b").value, 9u);
}

TEST_F(FaultInjectingStoreTest, FailReadsFailsGetOnly) {
  ASSERT_TRUE(AdvanceSync(*store_, "k", 5).fence.accepted);
  store_->SetFaults(FaultSpec{.fail_reads = true});
  auto g = GetSync(*store_, "k");
  EXPECT_EQ(g.status.code(), Status::Code::kIoError);
  EXPECT_EQ(g.value, std::nullopt);
  EXPECT_EQ(store_->Health().code(), Status::Code::kIoError);
  EXPECT_TRUE(AdvanceSync(*store_, "k", 6).fence.accepted);

  store_->SetFaults(FaultSpec{});
  g = GetSync(*store_, "k");
  ASSERT_TRUE(g.status.ok());
  EXPECT_EQ(g.value, 6u);
}

TEST_F(FaultInjectingStoreTest, DelayDefersEveryCompletionInOrder) {
  // Long next to a busy machine's pause between the Get and the look at
  // its answer below, which must find it still pending.
  constexpr auto kDelay = 500ms;
  store_->SetFaults(FaultSpec{.delay = kDelay});
  auto start = std::chrono::steady_clock::now();

  constexpr int kAdvances = 20;
  std::mutex mu;
  std::vector<uint64_t> order;
  std::latch done(kAdvances);
  for (int i = 0; i < kAdvances; ++i) {
    store_->Advance("k", i, [&, i](const Status& s, Fence f) {
      EXPECT_TRUE(s.ok() && f.accepted);
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(i);
      done.count_down();
    });
  }
  std::promise<std::chrono::steady_clock::time_point> got;
  store_->Get("k", [&](const Status&, std::optional<uint64_t>) {
    got.set_value(std::chrono::steady_clock::now());
  });
  auto got_future = got.get_future();
  // The calls returned without waiting; the answers are still pending.
  EXPECT_EQ(got_future.wait_for(0s), std::future_status::timeout);

  done.wait();
  auto advance_done = std::chrono::steady_clock::now();
  EXPECT_GE(advance_done - start, kDelay);
  EXPECT_GE(got_future.get() - start, kDelay);
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(order.size(), size_t{kAdvances});
  for (int i = 0; i < kAdvances; ++i) EXPECT_EQ(order[i], uint64_t(i));
  EXPECT_TRUE(store_->Health().ok()) << "a delay alone is not a fault";
}

TEST_F(FaultInjectingStoreTest, DelayedFailureStillFails) {
  store_->SetFaults(FaultSpec{.fail_writes = true, .delay = 50ms});
  auto start = std::chrono::steady_clock::now();
  auto r = AdvanceSync(*store_, "k", 1);
  EXPECT_EQ(r.status.code(), Status::Code::kIoError);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 50ms);
}

TEST_F(FaultInjectingStoreTest, CloseAnswersDelayedCompletionsAtOnce) {
  store_->SetFaults(FaultSpec{.delay = std::chrono::hours(1)});
  std::atomic<int> answered{0};
  for (int i = 0; i < 10; ++i) {
    store_->Advance("k", i, [&](const Status& s, Fence f) {
      EXPECT_TRUE(s.ok() && f.accepted);
      answered++;
    });
  }
  ASSERT_TRUE(store_->Close().ok());
  EXPECT_EQ(answered.load(), 10);  // not an hour later

  bool called = false;
  store_->Advance("k", 99, [&](const Status& s, Fence) {
    called = true;
    EXPECT_EQ(s.code(), Status::Code::kUnavailable);
  });
  EXPECT_TRUE(called);
  EXPECT_EQ(store_->Health().code(), Status::Code::kUnavailable);
  EXPECT_TRUE(store_->Close().ok());  // idempotent

  auto reopened = OpenRocks(dir_.path());
  ASSERT_NE(reopened, nullptr);
  EXPECT_EQ(GetSync(*reopened, "k").value, 9u);
}

TEST_F(FaultInjectingStoreTest, FaultsChangeWhileOperationsRun) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 500;
  std::atomic<bool> stop{false};
  std::thread toggler([&] {
    bool on = false;
    while (!stop.load()) {
      on = !on;
      store_->SetFaults(FaultSpec{.fail_writes = on, .fail_reads = on});
      (void)store_->Health();
      std::this_thread::yield();
    }
  });
  std::mutex mu;
  uint64_t max_accepted = 0;
  std::latch done(kThreads * kPerThread);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        uint64_t token = uint64_t(i) * kThreads + t;
        store_->Advance("k", token, [&, token](const Status& s, Fence f) {
          if (s.ok()) {
            std::lock_guard<std::mutex> lock(mu);
            if (f.accepted) max_accepted = std::max(max_accepted, token);
          } else {
            EXPECT_EQ(s.code(), Status::Code::kIoError);
          }
          done.count_down();
        });
      }
    });
  }
  for (auto& th : threads) th.join();
  done.wait();
  stop = true;
  toggler.join();
  store_->SetFaults(FaultSpec{});
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(GetSync(*store_, "k").value.value_or(0), max_accepted);
}

}  // namespace
}  // namespace fencegate::storage
