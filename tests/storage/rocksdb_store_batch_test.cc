// RocksDbStore::AdvanceAll: several keys advanced all or nothing, in one
// write, decided in call order among Advance and Raise calls.

#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "storage/rocksdb_store.h"
#include "tests/storage/test_util.h"

namespace fencegate::storage {
namespace {

using testing::AdvanceAllSync;
using testing::AdvanceSync;
using testing::BatchResult;
using testing::GetSync;
using testing::TempDir;

// The three ways a request is decided: by the writer after a synced write,
// on the caller's thread (async), by the writer alone (async).
struct Mode {
  Durability durability;
  bool decide_on_caller;
  const char* name;
};

void PrintTo(const Mode& mode, std::ostream* os) { *os << mode.name; }

std::unique_ptr<RocksDbStore> Open(const std::string& path, const Mode& mode) {
  RocksDbStoreOptions options;
  options.path = path;
  options.durability = mode.durability;
  options.decide_on_caller = mode.decide_on_caller;
  std::unique_ptr<RocksDbStore> store;
  Status s = RocksDbStore::Open(options, &store);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return store;
}

// "ok [5, 6]", "stale 1 [5, 0]" or the error: one line to compare.
std::string Describe(const Status& s, const BatchFence& f) {
  if (!s.ok()) return s.ToString();
  std::string out = f.accepted ? "ok [" : "stale " + std::to_string(f.stale) + " [";
  for (size_t i = 0; i < f.current.size(); ++i) {
    out += (i > 0 ? ", " : "") + std::to_string(f.current[i]);
  }
  return out + "]";
}
std::string Describe(const Status& s, const Fence& f) {
  if (!s.ok()) return s.ToString();
  return (f.accepted ? "ok " : "stale ") + std::to_string(f.current);
}

class RocksDbStoreBatchTest : public ::testing::TestWithParam<Mode> {
 protected:
  void SetUp() override {
    store_ = Open(dir_.path(), GetParam());
    ASSERT_NE(store_, nullptr);
  }
  TempDir dir_;
  std::unique_ptr<RocksDbStore> store_;
};

TEST_P(RocksDbStoreBatchTest, AcceptedAdvancesEveryKeyInOneWrite) {
  ASSERT_TRUE(AdvanceSync(*store_, "/b", 7).fence.accepted);
  const StoreStats before = store_->stats();
  BatchResult r = AdvanceAllSync(*store_, {{"/a", 5}, {"/b", 9}, {"/c", 0}});
  EXPECT_EQ(Describe(r.status, r.fence), "ok [5, 9, 0]");
  EXPECT_EQ(r.fence.stale, SIZE_MAX);
  EXPECT_EQ(GetSync(*store_, "/a").value, 5u);
  EXPECT_EQ(GetSync(*store_, "/b").value, 9u);
  EXPECT_EQ(GetSync(*store_, "/c").value, 0u);
  const StoreStats after = store_->stats();
  EXPECT_EQ(after.requests - before.requests, 1u);
  EXPECT_EQ(after.writes - before.writes, 3u);
  if (GetParam().durability == Durability::kSync) {
    EXPECT_EQ(after.db_writes - before.db_writes, 1u);  // one WriteBatch, one fsync
    EXPECT_EQ(after.syncs - before.syncs, 1u);
  }
  // Equal tokens are accepted; each item keeps its own maximum.
  r = AdvanceAllSync(*store_, {{"/a", 5}, {"/b", 9}});
  EXPECT_EQ(Describe(r.status, r.fence), "ok [5, 9]");
  r = AdvanceAllSync(*store_, {{"/b", 12}, {"/a", 6}});
  EXPECT_EQ(Describe(r.status, r.fence), "ok [12, 6]");
}

TEST_P(RocksDbStoreBatchTest, OneStaleItemStoresNothing) {
  ASSERT_TRUE(AdvanceSync(*store_, "/b", 10).fence.accepted);
  ASSERT_TRUE(AdvanceSync(*store_, "/d", 3).fence.accepted);
  BatchResult r = AdvanceAllSync(*store_, {{"/a", 5}, {"/b", 6}, {"/c", 1}, {"/d", 2}});
  // The first stale item is named; every item reports what is stored.
  EXPECT_EQ(Describe(r.status, r.fence), "stale 1 [0, 10, 0, 3]");
  EXPECT_EQ(GetSync(*store_, "/a").value, std::nullopt);
  EXPECT_EQ(GetSync(*store_, "/b").value, 10u);
  EXPECT_EQ(GetSync(*store_, "/c").value, std::nullopt);
  EXPECT_EQ(GetSync(*store_, "/d").value, 3u);
}

TEST_P(RocksDbStoreBatchTest, InvalidItemsAreRefusedAndStoreNothing) {
  std::vector<KeyToken> too_many;
  for (size_t i = 0; i <= kMaxBatchItems; ++i) too_many.push_back({"/k" + std::to_string(i), 1});
  const std::vector<std::vector<KeyToken>> invalid = {
      {},                                                                  // nothing to advance
      too_many,                                                            // past the bound
      {{"/a", 1}, {"/b", 1}, {"/a", 2}},                                   // a key twice
      {{"/a", 1}, {"", 1}},                                                // an empty key
      {{"/a", 1}, {std::string(RocksDbStore::kMaxKeyBytes + 1, 'x'), 1}},  // too long
  };
  for (const auto& items : invalid) {
    BatchResult r = AdvanceAllSync(*store_, items);
    EXPECT_EQ(r.status.code(), Status::Code::kInvalidArgument)
        << items.size() << " items: " << r.status.ToString();
  }
  EXPECT_EQ(GetSync(*store_, "/a").value, std::nullopt);
  EXPECT_EQ(GetSync(*store_, "/k0").value, std::nullopt);
  // The bound itself and the longest key are fine.
  too_many.pop_back();
  too_many.back().key = std::string(RocksDbStore::kMaxKeyBytes, 'x');
  BatchResult r = AdvanceAllSync(*store_, too_many);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_TRUE(r.fence.accepted);
  EXPECT_EQ(r.fence.current.size(), kMaxBatchItems);
  EXPECT_EQ(GetSync(*store_, std::string(RocksDbStore::kMaxKeyBytes, 'x')).value, 1u);
}

// One sequence of calls and what a store deciding them in call order
// answers. Call 3 sees call 2's advance of /b, call 9 sees that call 8
// stored nothing.
struct Call {
  enum Kind { kAdvance, kAdvanceAll, kRaise } kind;
  std::vector<KeyToken> items;  // one for Advance and Raise
  std::string expect;
};
const std::vector<Call>& Sequence() {
  static const std::vector<Call> calls = {
      {Call::kAdvance, {{"/a", 5}}, "ok 5"},
      {Call::kAdvanceAll, {{"/a", 4}, {"/b", 4}}, "stale 0 [5, 0]"},
      {Call::kAdvanceAll, {{"/a", 6}, {"/b", 6}}, "ok [6, 6]"},
      {Call::kAdvance, {{"/b", 5}}, "stale 6"},
      {Call::kRaise, {{"/c", 9}}, "ok 9"},
      {Call::kAdvanceAll, {{"/d", 1}, {"/c", 8}}, "stale 1 [0, 9]"},
      {Call::kAdvanceAll, {{"/d", 2}, {"/c", 9}, {"/a", 6}}, "ok [2, 9, 6]"},
      {Call::kAdvance, {{"/d", 2}}, "ok 2"},
      {Call::kAdvanceAll, {{"/a", 7}, {"/b", 5}}, "stale 1 [6, 6]"},
      {Call::kAdvance, {{"/a", 6}}, "ok 6"},
  };
  return calls;
}

// The answers of the calls, in a block the handlers share: a handler may
// still be leaving it (unlocking its mutex) after the test read the last
// answer and returned, so it lives as long as the last handler holding it.
struct Answers {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> answers = std::vector<std::string>(Sequence().size());
  std::vector<size_t> order;
};

// Makes call i; its answer goes to answers[i].
void MakeCall(TokenStore& store, size_t i, const std::shared_ptr<Answers>& out) {
  const Call& c = Sequence()[i];
  auto done = [out, i](std::string answer) {
    std::lock_guard lock(out->mu);
    out->answers[i] = std::move(answer);
    out->order.push_back(i);
    out->cv.notify_all();
  };
  switch (c.kind) {
    case Call::kAdvance:
      return store.Advance(c.items[0].key, c.items[0].token,
                           [done](const Status& s, const Fence& f) { done(Describe(s, f)); });
    case Call::kRaise:
      return store.Raise(c.items[0].key, c.items[0].token,
                         [done](const Status& s, const Fence& f) { done(Describe(s, f)); });
    case Call::kAdvanceAll:
      return store.AdvanceAll(
          c.items, [done](const Status& s, const BatchFence& f) { done(Describe(s, f)); });
  }
}

std::vector<std::string> Expected() {
  std::vector<std::string> out;
  for (const Call& c : Sequence()) out.push_back(c.expect);
  return out;
}

TEST_P(RocksDbStoreBatchTest, CallsOneAtATimeAreDecidedInCallOrder) {
  std::vector<std::string> answers;
  for (const Call& c : Sequence()) {
    if (c.kind == Call::kAdvanceAll) {
      BatchResult r = AdvanceAllSync(*store_, c.items);
      answers.push_back(Describe(r.status, r.fence));
      continue;
    }
    testing::FenceResult r = c.kind == Call::kAdvance
                                 ? AdvanceSync(*store_, c.items[0].key, c.items[0].token)
                                 : testing::RaiseSync(*store_, c.items[0].key, c.items[0].token);
    answers.push_back(Describe(r.status, r.fence));
  }
  EXPECT_EQ(answers, Expected());
}

// The calls made from inside a store handler queue while its decider holds
// the lane, and are then decided together, in one batch: each against the
// values the ones before it left in that batch.
TEST_P(RocksDbStoreBatchTest, CallsDecidedInOneBatchSeeEachOther) {
  auto out = std::make_shared<Answers>();
  const StoreStats before = store_->stats();
  store_->Advance("/first", 1, [this, out](const Status&, Fence) {
    for (size_t i = 0; i < Sequence().size(); ++i) MakeCall(*store_, i, out);
  });
  std::unique_lock lock(out->mu);
  ASSERT_TRUE(out->cv.wait_for(lock, testing::kHandlerDeadline,
                               [&] { return out->order.size() == Sequence().size(); }));
  const std::vector<std::string> answers = out->answers;
  const std::vector<size_t> order = out->order;
  lock.unlock();
  EXPECT_EQ(answers, Expected());
  std::vector<size_t> in_call_order(Sequence().size());
  for (size_t i = 0; i < in_call_order.size(); ++i) in_call_order[i] = i;
  EXPECT_EQ(order, in_call_order) << "handlers did not run in the order of the decisions";
  const StoreStats after = store_->stats();
  EXPECT_EQ(after.requests - before.requests, Sequence().size() + 1);
  EXPECT_EQ(after.batches - before.batches, 2u) << "the calls were not decided in one batch";
  // What the batch left is what a reader sees.
  EXPECT_EQ(GetSync(*store_, "/a").value, 6u);
  EXPECT_EQ(GetSync(*store_, "/b").value, 6u);
  EXPECT_EQ(GetSync(*store_, "/c").value, 9u);
  EXPECT_EQ(GetSync(*store_, "/d").value, 2u);
}

TEST_P(RocksDbStoreBatchTest, AcceptedBatchesSurviveReopen) {
  ASSERT_TRUE(AdvanceAllSync(*store_, {{"/a", 5}, {"/b", 6}}).fence.accepted);
  ASSERT_FALSE(AdvanceAllSync(*store_, {{"/c", 1}, {"/a", 4}}).fence.accepted);
  ASSERT_TRUE(AdvanceAllSync(*store_, {{"/b", 8}, {"/c", 2}}).fence.accepted);
  ASSERT_TRUE(store_->Close().ok());
  store_.reset();
  store_ = Open(dir_.path(), GetParam());
  ASSERT_NE(store_, nullptr);
  EXPECT_EQ(GetSync(*store_, "/a").value, 5u);
  EXPECT_EQ(GetSync(*store_, "/b").value, 8u);
  EXPECT_EQ(GetSync(*store_, "/c").value, 2u);
  BatchResult r = AdvanceAllSync(*store_, {{"/a", 5}, {"/c", 1}});
  EXPECT_EQ(Describe(r.status, r.fence), "stale 1 [5, 2]");
}

TEST_P(RocksDbStoreBatchTest, AfterCloseEveryBatchIsUnavailable) {
  ASSERT_TRUE(store_->Close().ok());
  EXPECT_EQ(AdvanceAllSync(*store_, {{"/a", 1}}).status.code(), Status::Code::kUnavailable);
}

INSTANTIATE_TEST_SUITE_P(Modes, RocksDbStoreBatchTest,
                         ::testing::Values(Mode{Durability::kSync, true, "Sync"},
                                           Mode{Durability::kAsync, true, "AsyncOnCaller"},
                                           Mode{Durability::kAsync, false, "AsyncWriterOnly"}),
                         [](const ::testing::TestParamInfo<Mode>& info) {
                           return std::string(info.param.name);
                         });

// Async durability, nothing else deciding: an AdvanceAll is decided on the
// caller's thread, like an Advance, before the call returns.
TEST(RocksDbStoreBatch, AsyncBatchWhileIdleIsDecidedOnTheCallersThread) {
  TempDir dir;
  auto store = Open(dir.path(), Mode{Durability::kAsync, true, ""});
  ASSERT_NE(store, nullptr);
  std::optional<std::thread::id> ran_on;
  store->AdvanceAll({{"/a", 3}, {"/b", 4}}, [&](const Status& s, const BatchFence& f) {
    EXPECT_EQ(Describe(s, f), "ok [3, 4]");
    ran_on = std::this_thread::get_id();
  });
  ASSERT_TRUE(ran_on.has_value()) << "handler had not run when AdvanceAll returned";
  EXPECT_EQ(*ran_on, std::this_thread::get_id());
  EXPECT_EQ(store->stats().caller_decided, 1u);
}

// A batch with one key whose value is only on disk is not decided on the
// caller's thread (which never reads a file): the writer decides it whole,
// against the stored value.
TEST(RocksDbStoreBatch, AsyncBatchWithAnUncachedKeyIsDecidedByTheWriter) {
  TempDir dir;
  {
    auto store = Open(dir.path(), Mode{Durability::kAsync, true, ""});
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(AdvanceSync(*store, "/k", 10).fence.accepted);
    ASSERT_TRUE(store->Close().ok());
  }
  auto store = Open(dir.path(), Mode{Durability::kAsync, true, ""});
  ASSERT_NE(store, nullptr);
  std::promise<std::pair<std::thread::id, std::string>> answer;
  store->AdvanceAll({{"/fresh", 1}, {"/k", 9}}, [&](const Status& s, const BatchFence& f) {
    answer.set_value({std::this_thread::get_id(), Describe(s, f)});
  });
  auto answered = answer.get_future();
  ASSERT_EQ(answered.wait_for(testing::kHandlerDeadline), std::future_status::ready);
  auto [ran_on, got] = answered.get();
  EXPECT_NE(ran_on, std::this_thread::get_id());
  EXPECT_EQ(got, "stale 1 [0, 10]");
  EXPECT_EQ(store->stats().caller_decided, 0u);
  EXPECT_EQ(GetSync(*store, "/fresh").value, std::nullopt);
}

}  // namespace
}  // namespace fencegate::storage
