// The TokenStore contract (storage/token_store.h), one suite run over every
// engine: the in-memory one that the tests of the layers above use, and
// RocksDB, each in both of its ways of answering (on a store thread, and on
// the caller's thread). What passes here for the memory store holds for
// RocksDB too, which is what makes a test on the memory store worth
// something.

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "storage/memory_store.h"
#include "storage/rocksdb_store.h"
#include "storage/token_store.h"
#include "tests/storage/test_util.h"

namespace fencegate::storage {
namespace {

using testing::AdvanceAllSync;
using testing::AdvanceTreeSync;
using testing::GetNodeSync;
using testing::AdvanceSync;
using testing::BatchResult;
using testing::FenceResult;
using testing::GetResult;
using testing::GetSync;
using testing::OpenRocks;
using testing::RaiseSync;
using testing::TempDir;

static_assert(MemoryStore::kMaxKeyBytes == RocksDbStore::kMaxKeyBytes);

struct Engine {
  std::string name;
  std::function<std::unique_ptr<TokenStore>(const std::string& dir)> open;
};

// gtest names the engine of a failed test with this.
void PrintTo(const Engine& engine, std::ostream* os) { *os << engine.name; }

std::vector<Engine> Engines() {
  return {
      {"Memory", [](const std::string&) { return std::make_unique<MemoryStore>(); }},
      {"MemoryOnCaller",
       [](const std::string&) {
         return std::make_unique<MemoryStore>(MemoryStoreOptions{.answer_on_caller = true});
       }},
      {"RocksDbSync",
       [](const std::string& dir) { return OpenRocks(dir + "/db", Durability::kSync); }},
      {"RocksDbAsync",
       [](const std::string& dir) { return OpenRocks(dir + "/db", Durability::kAsync); }},
  };
}

class TokenStoreContract : public ::testing::TestWithParam<Engine> {
 protected:
  void SetUp() override {
    store_ = GetParam().open(dir_.path());
    ASSERT_NE(store_, nullptr);
  }
  TokenStore& store() { return *store_; }

  TempDir dir_;
  std::unique_ptr<TokenStore> store_;  // after dir_: closed before it goes
};

// Counts answers and waits for a number of them, with a deadline.
class Answers {
 public:
  void Add() {
    std::lock_guard<std::mutex> lock(mu_);
    ++count_;
    cv_.notify_all();
  }
  bool WaitFor(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, testing::kHandlerDeadline, [&] { return count_ >= n; });
  }
  int count() {
    std::lock_guard<std::mutex> lock(mu_);
    return count_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int count_ = 0;
};

void ExpectFence(const FenceResult& r, bool accepted, uint64_t current) {
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(r.fence.accepted, accepted);
  EXPECT_EQ(r.fence.current, current);
}

TEST_P(TokenStoreContract, AnAbsentKeyReadsAsNothingAndAcceptsAnyToken) {
  GetResult absent = GetSync(store(), "/a");
  ASSERT_TRUE(absent.status.ok()) << absent.status.ToString();
  EXPECT_EQ(absent.value, std::nullopt);
  ExpectFence(AdvanceSync(store(), "/a", 7), true, 7);
  EXPECT_EQ(GetSync(store(), "/a").value, 7u);
  // Token 0 is a token: stored, and the key is then present.
  ExpectFence(AdvanceSync(store(), "/zero", 0), true, 0);
  EXPECT_EQ(GetSync(store(), "/zero").value, 0u);
}

TEST_P(TokenStoreContract, AdvanceAcceptsAnEqualOrHigherTokenAndRefusesALowerOne) {
  ExpectFence(AdvanceSync(store(), "/k", 10), true, 10);
  ExpectFence(AdvanceSync(store(), "/k", 10), true, 10);  // the same holder again
  ExpectFence(AdvanceSync(store(), "/k", 9), false, 10);
  EXPECT_EQ(GetSync(store(), "/k").value, 10u) << "a refused Advance stored its token";
  ExpectFence(AdvanceSync(store(), "/k", 11), true, 11);
  ExpectFence(AdvanceSync(store(), "/k", UINT64_MAX), true, UINT64_MAX);
  ExpectFence(AdvanceSync(store(), "/k", 0), false, UINT64_MAX);
  ExpectFence(AdvanceSync(store(), "/other", 1), true, 1);  // keys are independent
}

TEST_P(TokenStoreContract, RaiseNeverRefusesAndNeverLowers) {
  ExpectFence(RaiseSync(store(), "/r", 5), true, 5);
  ExpectFence(RaiseSync(store(), "/r", 3), true, 5);
  EXPECT_EQ(GetSync(store(), "/r").value, 5u);
  ExpectFence(RaiseSync(store(), "/r", 8), true, 8);
  ExpectFence(AdvanceSync(store(), "/r", 7), false, 8);
  ExpectFence(AdvanceSync(store(), "/r", 8), true, 8);
}

TEST_P(TokenStoreContract, AdvanceAllAcceptsWholeAndStoresEachItemsMaximum) {
  ExpectFence(AdvanceSync(store(), "/a", 5), true, 5);
  BatchResult r = AdvanceAllSync(store(), {{"/a", 6}, {"/b", 2}});
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_TRUE(r.fence.accepted);
  EXPECT_EQ(r.fence.current, (std::vector<uint64_t>{6, 2}));
  EXPECT_EQ(r.fence.stale, SIZE_MAX);
  EXPECT_EQ(GetSync(store(), "/a").value, 6u);
  EXPECT_EQ(GetSync(store(), "/b").value, 2u);
  r = AdvanceAllSync(store(), {{"/b", 2}, {"/a", 6}});  // equal tokens: accepted again
  ASSERT_TRUE(r.status.ok());
  EXPECT_TRUE(r.fence.accepted);
  EXPECT_EQ(r.fence.current, (std::vector<uint64_t>{2, 6}));
}

TEST_P(TokenStoreContract, AdvanceAllRefusesWholeNamingTheFirstStaleItem) {
  ExpectFence(AdvanceSync(store(), "/a", 5), true, 5);
  ExpectFence(AdvanceSync(store(), "/c", 9), true, 9);
  BatchResult r = AdvanceAllSync(store(), {{"/b", 4}, {"/a", 4}, {"/c", 1}});
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_FALSE(r.fence.accepted);
  EXPECT_EQ(r.fence.stale, 1u);
  EXPECT_EQ(r.fence.current, (std::vector<uint64_t>{0, 5, 9}));  // 0: absent
  EXPECT_EQ(GetSync(store(), "/b").value, std::nullopt) << "a refused batch stored an item";
  EXPECT_EQ(GetSync(store(), "/a").value, 5u);
  EXPECT_EQ(GetSync(store(), "/c").value, 9u);
}

TEST_P(TokenStoreContract, AdvanceAllRefusesWhatCheckBatchItemsRefuses) {
  std::vector<KeyToken> too_many;
  for (size_t i = 0; i <= kMaxBatchItems; ++i) too_many.push_back({"/m" + std::to_string(i), 1});
  const std::vector<std::vector<KeyToken>> refused = {
      {},
      too_many,
      {{"/x", 1}, {"", 1}},
      {{"/x", 1}, {"/y", 1}, {"/x", 2}},
      {{"/x", 1}, {"/" + std::string(MemoryStore::kMaxKeyBytes, 'k'), 1}},
  };
  for (const std::vector<KeyToken>& items : refused) {
    BatchResult r = AdvanceAllSync(store(), items);
    EXPECT_EQ(r.status.code(), Status::Code::kInvalidArgument)
        << items.size() << " items: " << r.status.ToString();
  }
  EXPECT_EQ(GetSync(store(), "/x").value, std::nullopt) << "a refused batch stored an item";
  EXPECT_EQ(GetSync(store(), "/m0").value, std::nullopt);
  too_many.pop_back();  // exactly kMaxBatchItems
  BatchResult r = AdvanceAllSync(store(), too_many);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_TRUE(r.fence.accepted);
}

TEST_P(TokenStoreContract, AKeyUpToTheLimitIsTakenALongerOneRefused) {
  const std::string longest(MemoryStore::kMaxKeyBytes, 'k');
  ExpectFence(AdvanceSync(store(), longest, 3), true, 3);
  EXPECT_EQ(GetSync(store(), longest).value, 3u);
  const std::string longer = longest + "k";
  EXPECT_EQ(AdvanceSync(store(), longer, 1).status.code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(RaiseSync(store(), longer, 1).status.code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(GetSync(store(), longer).status.code(), Status::Code::kInvalidArgument);
}

// The first two bytes of the store's own records' keys (token_store.h:
// idempotency records, the tree's nodes) are no token key's beginning, in
// any engine, whether or not it keeps such records.
TEST_P(TokenStoreContract, ATokenKeyCannotBeginAsTheStoresOwnRecords) {
  const std::string taken("\0ik", 3);
  EXPECT_EQ(AdvanceSync(store(), taken, 1).status.code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(RaiseSync(store(), taken, 1).status.code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(GetSync(store(), taken).status.code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(AdvanceAllSync(store(), {{"a", 1}, {taken, 1}}).status.code(),
            Status::Code::kInvalidArgument);
  EXPECT_FALSE(GetSync(store(), "a").value.has_value()) << "all or nothing";
  EXPECT_EQ(AdvanceSync(store(), std::string("\0t/a", 4), 1).status.code(),
            Status::Code::kInvalidArgument);
  // A NUL byte followed by anything else is a key like any other.
  ExpectFence(AdvanceSync(store(), std::string("\0j", 2), 4), true, 4);
}

// AdvanceTree decides as the plain model of the rule does
// (tests/storage/tree_model.h), over random writes, and keeps what it
// accepted: keys, and nodes that GetNode reads back.
TEST_P(TokenStoreContract, AdvanceTreeDecidesAsTheModel) {
  ASSERT_EQ(testing::TreeDisagreement(store(), 7, 400), "");
  // A path written with token 100 under the shared part of the tree.
  TreeWrite w;
  w.keys = {"/c/z"};
  w.token = 100;
  w.targets = {{"/c/z", "/c/z", false, Nesting::kShared}};
  ASSERT_EQ(AdvanceTreeSync(store(), w).verdict.kind, TreeVerdict::Kind::kAccepted);
  EXPECT_EQ(GetSync(store(), "/c/z").value, 100u);
  testing::NodeResult node = GetNodeSync(store(), "/c/z");
  ASSERT_TRUE(node.status.ok()) << node.status.ToString();
  ASSERT_TRUE(node.node.has_value());
  EXPECT_TRUE(node.node->fenced);
  EXPECT_EQ(node.node->token, 100u);
  node = GetNodeSync(store(), "/c");
  ASSERT_TRUE(node.node.has_value());
  EXPECT_EQ(node.node->below, 100u);
  EXPECT_EQ(node.node->below_path, "/c/z");
  EXPECT_FALSE(GetNodeSync(store(), "/nowhere").node.has_value());
}

TEST_P(TokenStoreContract, AdvanceTreeRefusesAMalformedWriteAndStoresNothing) {
  TreeWrite w;
  w.keys = {"/a", "/a"};
  w.token = 1;
  w.targets = {{"/a", "/a", true, Nesting::kPerKey}};
  EXPECT_EQ(AdvanceTreeSync(store(), w).status.code(), Status::Code::kInvalidArgument);
  w.keys = {"/a"};
  w.targets = {};
  EXPECT_EQ(AdvanceTreeSync(store(), w).status.code(), Status::Code::kInvalidArgument);
  w.targets = {{"/a/", "/a", true, Nesting::kPerKey}};
  EXPECT_EQ(AdvanceTreeSync(store(), w).status.code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(GetSync(store(), "/a").value, std::nullopt);
  EXPECT_FALSE(GetNodeSync(store(), "/").node.has_value());
}

// Calls made one after the other without waiting for their answers are
// decided in that order (token_store.h, "Order"), whatever their kind.
TEST_P(TokenStoreContract, CallsAreDecidedInTheOrderTheyWereMade) {
  struct Want {
    bool accepted;
    std::vector<uint64_t> current;
    size_t stale = SIZE_MAX;
  };
  struct Got {
    int answers = 0;
    Status status;
    BatchFence fence;
  };
  constexpr uint64_t kRounds = 40;
  constexpr size_t kCallsPerRound = 9;
  std::vector<Want> want;
  std::vector<Got> got;
  got.reserve(kRounds * kCallsPerRound);  // handlers keep pointers into it
  Answers answers;
  auto fence_into = [&](Got* g) {
    return [g, &answers](const Status& s, Fence f) {
      ++g->answers;
      g->status = s;
      g->fence = BatchFence{f.accepted, {f.current}, SIZE_MAX};
      answers.Add();
    };
  };
  auto batch_into = [&](Got* g) {
    return [g, &answers](const Status& s, const BatchFence& f) {
      ++g->answers;
      g->status = s;
      g->fence = f;
      answers.Add();
    };
  };
  auto advance = [&](const std::string& key, uint64_t token, Want w) {
    want.push_back(std::move(w));
    store().Advance(key, token, fence_into(&got.emplace_back()));
  };
  auto raise = [&](const std::string& key, uint64_t token, Want w) {
    want.push_back(std::move(w));
    store().Raise(key, token, fence_into(&got.emplace_back()));
  };
  auto advance_all = [&](std::vector<KeyToken> items, Want w) {
    want.push_back(std::move(w));
    store().AdvanceAll(std::move(items), batch_into(&got.emplace_back()));
  };
  for (uint64_t b = 0; b < 100 * kRounds; b += 100) {  // each round above the one before
    advance("/o", b + 5, {true, {b + 5}});
    advance("/o", b + 3, {false, {b + 5}});
    raise("/o", b + 4, {true, {b + 5}});
    advance_all({{"/p", b + 1}, {"/o", b + 7}}, {true, {b + 1, b + 7}});
    advance("/o", b + 6, {false, {b + 7}});
    raise("/o", b + 9, {true, {b + 9}});
    advance_all({{"/o", b + 8}, {"/p", b + 2}}, {false, {b + 9, b + 1}, 0});
    advance("/p", b + 2, {true, {b + 2}});
    advance("/o", b + 9, {true, {b + 9}});
  }
  ASSERT_TRUE(answers.WaitFor(static_cast<int>(want.size())));
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].answers, 1) << "call " << i;
    ASSERT_TRUE(got[i].status.ok()) << "call " << i << ": " << got[i].status.ToString();
    EXPECT_EQ(got[i].fence.accepted, want[i].accepted) << "call " << i;
    EXPECT_EQ(got[i].fence.current, want[i].current) << "call " << i;
    EXPECT_EQ(got[i].fence.stale, want[i].stale) << "call " << i;
  }
}

// A handler runs on a thread the store owns, or on the caller's thread
// before the call returns; never on the caller's thread later.
TEST_P(TokenStoreContract, AHandlerRunsOnTheStoresThreadOrBeforeTheCallReturns) {
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<bool> returned{false};
  std::atomic<int> late{0};
  Answers answers;
  auto check = [&] {
    if (std::this_thread::get_id() == caller && returned.load()) ++late;
    answers.Add();
  };
  auto call = [&](const std::function<void()>& make) {
    returned = false;
    make();
    returned = true;
  };
  call([&] { store().Advance("/t", 1, [&](const Status&, Fence) { check(); }); });
  call([&] { store().Raise("/t", 2, [&](const Status&, Fence) { check(); }); });
  call([&] { store().AdvanceAll({{"/t", 3}, {"/u", 1}}, [&](const Status&, const BatchFence&) { check(); }); });
  call([&] { store().Get("/t", [&](const Status&, std::optional<uint64_t>) { check(); }); });
  ASSERT_TRUE(answers.WaitFor(4));
  EXPECT_EQ(late.load(), 0);
}

// Callers on several threads, each waiting for its own answers: the stored
// value never goes down, and each caller sees it only go up.
TEST_P(TokenStoreContract, ConcurrentAdvancesNeverLowerTheStoredValue) {
  constexpr uint64_t kThreads = 4;
  constexpr uint64_t kPerThread = 100;
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  std::atomic<int> wrong{0};
  for (uint64_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      uint64_t seen = 0;
      for (uint64_t i = 0; i < kPerThread; ++i) {
        const uint64_t token = i * kThreads + t;
        FenceResult r = AdvanceSync(store(), "/hot", token);
        const bool consistent = r.status.ok() && r.fence.current >= seen &&
                                (r.fence.accepted ? r.fence.current == token
                                                  : r.fence.current > token);
        if (!consistent) ++wrong;
        seen = r.fence.current;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(GetSync(store(), "/hot").value, kThreads * kPerThread - 1);
}

TEST_P(TokenStoreContract, CloseAnswersEveryCallMadeBeforeItAndRefusesLaterOnes) {
  EXPECT_TRUE(store().Health().ok());
  constexpr int kCalls = 100;
  std::atomic<int> ok{0};
  Answers answers;
  for (int i = 0; i < kCalls; ++i) {
    store().Advance("/c" + std::to_string(i % 7), static_cast<uint64_t>(i),
                    [&](const Status& s, Fence f) {
                      if (s.ok() && f.accepted) ++ok;
                      answers.Add();
                    });
  }
  Status closed = store().Close();
  EXPECT_TRUE(closed.ok()) << closed.ToString();
  EXPECT_EQ(answers.count(), kCalls) << "Close() returned before answering every call";
  EXPECT_EQ(ok.load(), kCalls);

  EXPECT_EQ(store().Health().code(), Status::Code::kUnavailable);
  EXPECT_EQ(AdvanceSync(store(), "/c0", 1000).status.code(), Status::Code::kUnavailable);
  EXPECT_EQ(RaiseSync(store(), "/c0", 1000).status.code(), Status::Code::kUnavailable);
  EXPECT_EQ(AdvanceAllSync(store(), {{"/c0", 1000}}).status.code(),
            Status::Code::kUnavailable);
  EXPECT_EQ(GetSync(store(), "/c0").status.code(), Status::Code::kUnavailable);
  EXPECT_TRUE(store().Close().ok()) << "a second Close() returns the first one's Status";
}

INSTANTIATE_TEST_SUITE_P(Engines, TokenStoreContract, ::testing::ValuesIn(Engines()),
                         [](const ::testing::TestParamInfo<Engine>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace fencegate::storage
