// RocksDbStore: the Advance/Raise/Get contract, persistence, Close().

#include "storage/rocksdb_store.h"

#include <atomic>
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <future>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <chrono>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <rocksdb/db.h>

#include "tests/storage/test_util.h"

namespace fencegate::storage {
namespace {

using testing::AdvanceSync;
using testing::GetSync;
using testing::OpenRocks;
using testing::RaiseSync;
using testing::TempDir;

TEST(RocksDbStoreTest, AdvanceAcceptsHigherAndEqualRefusesLower) {
  TempDir dir;
  auto store = OpenRocks(dir.path());
  ASSERT_NE(store, nullptr);

  auto r = AdvanceSync(*store, "/objects/a", 10);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_TRUE(r.fence.accepted);
  EXPECT_EQ(r.fence.current, 10u);

  r = AdvanceSync(*store, "/objects/a", 10);  // same holder writes again
  ASSERT_TRUE(r.status.ok());
  EXPECT_TRUE(r.fence.accepted);
  EXPECT_EQ(r.fence.current, 10u);

  r = AdvanceSync(*store, "/objects/a", 12);
  ASSERT_TRUE(r.status.ok());
  EXPECT_TRUE(r.fence.accepted);
  EXPECT_EQ(r.fence.current, 12u);

  r = AdvanceSync(*store, "/objects/a", 11);  // a paused, stale holder
  ASSERT_TRUE(r.status.ok());
  EXPECT_FALSE(r.fence.accepted);
  EXPECT_EQ(r.fence.current, 12u);
  EXPECT_EQ(GetSync(*store, "/objects/a").value, 12u);

  // Keys are independent.
  r = AdvanceSync(*store, "/objects/b", 1);
  EXPECT_TRUE(r.fence.accepted);
  EXPECT_EQ(r.fence.current, 1u);
}

TEST(RocksDbStoreTest, TokenZeroOnAnAbsentKeyIsStored) {
  TempDir dir;
  auto store = OpenRocks(dir.path());
  ASSERT_NE(store, nullptr);
  auto r = AdvanceSync(*store, "k", 0);
  ASSERT_TRUE(r.status.ok());
  EXPECT_TRUE(r.fence.accepted);
  EXPECT_EQ(r.fence.current, 0u);
  auto g = GetSync(*store, "k");
  ASSERT_TRUE(g.status.ok());
  EXPECT_EQ(g.value, std::optional<uint64_t>(0));
}

TEST(RocksDbStoreTest, RaiseNeverLowersAndNeverRefuses) {
  TempDir dir;
  auto store = OpenRocks(dir.path());
  ASSERT_NE(store, nullptr);

  auto r = RaiseSync(*store, "k", 50);
  ASSERT_TRUE(r.status.ok());
  EXPECT_TRUE(r.fence.accepted);
  EXPECT_EQ(r.fence.current, 50u);

  r = RaiseSync(*store, "k", 20);
  ASSERT_TRUE(r.status.ok());
  EXPECT_TRUE(r.fence.accepted);
  EXPECT_EQ(r.fence.current, 50u);
  EXPECT_EQ(GetSync(*store, "k").value, 50u);

  // After an administrative raise, older holders are fenced out.
  r = AdvanceSync(*store, "k", 49);
  EXPECT_FALSE(r.fence.accepted);
  EXPECT_EQ(r.fence.current, 50u);
}

TEST(RocksDbStoreTest, GetAbsentAndPresent) {
  TempDir dir;
  auto store = OpenRocks(dir.path());
  ASSERT_NE(store, nullptr);
  auto g = GetSync(*store, "/never");
  ASSERT_TRUE(g.status.ok()) << g.status.ToString();
  EXPECT_EQ(g.value, std::nullopt);

  ASSERT_TRUE(AdvanceSync(*store, "/seen", 7).status.ok());
  g = GetSync(*store, "/seen");
  ASSERT_TRUE(g.status.ok());
  EXPECT_EQ(g.value, 7u);
}

class RocksDbStoreDurabilityTest : public ::testing::TestWithParam<Durability> {};

TEST_P(RocksDbStoreDurabilityTest, TokensSurviveCloseAndReopen) {
  TempDir dir;
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  {
    auto store = OpenRocks(dir.path(), GetParam());
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(AdvanceSync(*store, "/a", 5).status.ok());
    ASSERT_TRUE(AdvanceSync(*store, "/a", 9).status.ok());
    ASSERT_TRUE(RaiseSync(*store, "/b", 3).status.ok());
    ASSERT_TRUE(AdvanceSync(*store, "/max", kMax).status.ok());
    ASSERT_TRUE(store->Close().ok());
  }
  auto store = OpenRocks(dir.path(), GetParam());
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(GetSync(*store, "/a").value, 9u);
  EXPECT_EQ(GetSync(*store, "/b").value, 3u);
  EXPECT_EQ(GetSync(*store, "/max").value, kMax);
  EXPECT_FALSE(AdvanceSync(*store, "/a", 8).fence.accepted);
}

TEST_P(RocksDbStoreDurabilityTest, DestructorClosesAndPersists) {
  TempDir dir;
  {
    auto store = OpenRocks(dir.path(), GetParam());
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(AdvanceSync(*store, "/a", 42).status.ok());
  }  // no explicit Close()
  auto store = OpenRocks(dir.path(), GetParam());
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(GetSync(*store, "/a").value, 42u);
}

INSTANTIATE_TEST_SUITE_P(BothDurabilities, RocksDbStoreDurabilityTest,
                         ::testing::Values(Durability::kSync,
                                           Durability::kAsync),
                         [](const auto& info) {
                           return info.param == Durability::kSync ? "Sync"
                                                                  : "Async";
                         });

TEST(RocksDbStoreTest, ValuesAreEightBytesBigEndian) {
  TempDir dir;
  {
    auto store = OpenRocks(dir.path());
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(AdvanceSync(*store, "k", 0x0102030405060708ull).status.ok());
  }
  rocksdb::DB* raw = nullptr;
  ASSERT_TRUE(rocksdb::DB::OpenForReadOnly(rocksdb::Options(), dir.path(), &raw)
                  .ok());
  std::unique_ptr<rocksdb::DB> db(raw);
  std::string value;
  ASSERT_TRUE(db->Get(rocksdb::ReadOptions(), "k", &value).ok());
  EXPECT_EQ(value, std::string("\x01\x02\x03\x04\x05\x06\x07\x08", 8));
}

TEST(RocksDbStoreTest, KeysLongerThan1024BytesAreRefusedAtOnce) {
  TempDir dir;
  auto store = OpenRocks(dir.path());
  ASSERT_NE(store, nullptr);
  bool called = false;
  Status status;
  store->Advance(std::string(1025, 'k'), 1, [&](const Status& s, Fence) {
    called = true;
    status = s;
  });
  EXPECT_TRUE(called);  // immediate errors run before the call returns
  EXPECT_EQ(status.code(), Status::Code::kInvalidArgument);

  auto g = GetSync(*store, std::string(1025, 'k'));
  EXPECT_EQ(g.status.code(), Status::Code::kInvalidArgument);

  auto r = AdvanceSync(*store, std::string(1024, 'k'), 1);
  EXPECT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(GetSync(*store, std::string(1024, 'k')).value, 1u);
}

TEST(RocksDbStoreTest, CloseAnswersEverythingQueuedThenRefuses) {
  TempDir dir;
  constexpr int kRequests = 2000;
  auto store = OpenRocks(dir.path());
  ASSERT_NE(store, nullptr);
  std::atomic<int> answered{0};
  std::atomic<int> accepted{0};
  for (int i = 0; i < kRequests; ++i) {
    store->Advance("k" + std::to_string(i % 10), i,
                   [&](const Status& s, Fence f) {
                     if (s.ok() && f.accepted) accepted++;
                     answered++;
                   });
  }
  Status closed = store->Close();
  ASSERT_TRUE(closed.ok()) << closed.ToString();
  // Close() returned only after the writer answered the whole queue.
  EXPECT_EQ(answered.load(), kRequests);
  EXPECT_EQ(accepted.load(), kRequests);

  bool called = false;
  store->Advance("k0", 1u << 30, [&](const Status& s, Fence) {
    called = true;
    EXPECT_EQ(s.code(), Status::Code::kUnavailable);
  });
  EXPECT_TRUE(called);
  called = false;
  store->Get("k0", [&](const Status& s, std::optional<uint64_t>) {
    called = true;
    EXPECT_EQ(s.code(), Status::Code::kUnavailable);
  });
  EXPECT_TRUE(called);
  EXPECT_EQ(store->Health().code(), Status::Code::kUnavailable);
  EXPECT_TRUE(store->Close().ok());  // idempotent

  auto reopened = OpenRocks(dir.path());
  ASSERT_NE(reopened, nullptr);
  EXPECT_EQ(GetSync(*reopened, "k9").value, uint64_t{kRequests - 1});
}

TEST(RocksDbStoreTest, CloseFromAHandlerIsRefused) {
  TempDir dir;
  auto store = OpenRocks(dir.path());
  ASSERT_NE(store, nullptr);
  std::promise<Status> from_handler;
  store->Advance("k", 1, [&](const Status&, Fence) {
    from_handler.set_value(store->Close());
  });
  auto f = from_handler.get_future();
  ASSERT_EQ(f.wait_for(testing::kHandlerDeadline), std::future_status::ready);
  EXPECT_EQ(f.get().code(), Status::Code::kInvalidArgument);
  EXPECT_TRUE(store->Health().ok());
  EXPECT_TRUE(store->Close().ok());
}

TEST(RocksDbStoreTest, HandlersRunOnStoreThreads) {
  TempDir dir;
  auto store = OpenRocks(dir.path());
  ASSERT_NE(store, nullptr);
  std::promise<std::thread::id> advance_thread, get_thread;
  store->Advance("k", 1, [&](const Status&, Fence) {
    advance_thread.set_value(std::this_thread::get_id());
  });
  store->Get("k", [&](const Status&, std::optional<uint64_t>) {
    get_thread.set_value(std::this_thread::get_id());
  });
  std::thread::id writer = advance_thread.get_future().get();
  std::thread::id reader = get_thread.get_future().get();
  EXPECT_NE(writer, std::this_thread::get_id());
  EXPECT_NE(reader, std::this_thread::get_id());
  EXPECT_NE(writer, reader);
}

// Under async durability, an Advance made while the store is idle is decided
// and committed on the caller's thread; its handler runs before the call
// returns. Under sync, never: every request shares the writer's fsync.
TEST(RocksDbStoreTest, AsyncAdvanceWhileIdleIsDecidedOnTheCallersThread) {
  TempDir dir;
  {
    auto store = OpenRocks(dir.path(), Durability::kAsync);
    ASSERT_NE(store, nullptr);
    for (uint64_t token : {5, 7, 6}) {
      std::optional<std::thread::id> ran_on;
      Fence fence;
      store->Advance("k", token, [&](const Status& s, const Fence& f) {
        EXPECT_TRUE(s.ok()) << s.ToString();
        ran_on = std::this_thread::get_id();
        fence = f;
      });
      ASSERT_TRUE(ran_on.has_value()) << "handler had not run when Advance returned";
      EXPECT_EQ(*ran_on, std::this_thread::get_id());
      EXPECT_EQ(fence.accepted, token != 6) << token;
      EXPECT_EQ(fence.current, token == 5 ? 5u : 7u) << token;
    }
    StoreStats s = store->stats();
    EXPECT_EQ(s.caller_decided, 3u);
    EXPECT_EQ(s.requests, 3u);
    EXPECT_EQ(s.writes, 2u);  // 5 and 7; the refused 6 wrote nothing
    EXPECT_EQ(s.syncs, 0u);
    ASSERT_TRUE(store->Close().ok());
  }
  auto reopened = OpenRocks(dir.path());
  ASSERT_NE(reopened, nullptr);
  EXPECT_EQ(GetSync(*reopened, "k").value, 7u);
}

// A few keys rewritten many times: the memtable rewrites them in place and
// never fills, so the store's own WAL limit (wal_bytes_per_flush, 16 MiB) is
// what switches it and lets the old WAL go. Without it the WAL, all of
// which a start after a crash replays, grew with every write (to 62 MB
// here).
TEST(RocksDbStoreTest, RewritingAFewKeysKeepsTheWalBounded) {
  TempDir dir;
  auto wal_bytes = [&dir] {
    uintmax_t total = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
      if (e.path().extension() == ".log") {  // RocksDB's WAL
        std::error_code gone;  // deleted by RocksDB since it was listed: 0
        const uintmax_t size = e.file_size(gone);
        if (!gone) total += size;
      }
    }
    return total;
  };
  constexpr uintmax_t kLimit = 16u << 20;
  std::vector<std::string> keys;
  for (char c = 'a'; c < 'i'; ++c) keys.push_back(std::string(1000, c));
  uintmax_t most = 0;
  {
    auto store = OpenRocks(dir.path(), Durability::kAsync);
    ASSERT_NE(store, nullptr);
    uint64_t token = 0;
    for (int i = 0; i < 60000; ++i) {
      auto r = AdvanceSync(*store, keys[i % keys.size()], ++token);
      ASSERT_TRUE(r.status.ok()) << r.status.ToString();
      ASSERT_TRUE(r.fence.accepted);
      if (i % 1000 == 999) most = std::max(most, wal_bytes());
    }
    // The flush runs in the background: the limit is passed by what is
    // written while it runs, never by the whole 60 MiB.
    EXPECT_LT(most, 2 * kLimit) << "the WAL grew to " << most << " bytes";
    EXPECT_GE(store->stats().flushes, 3u);
    ASSERT_TRUE(store->Close().ok());
  }
  auto reopened = OpenRocks(dir.path());
  ASSERT_NE(reopened, nullptr);
  for (size_t k = 0; k < keys.size(); ++k) {
    // The last token written to key k: keys take turns, token i+1 went to key i % 8.
    uint64_t last = 60000 - ((60000 - 1 - k) % keys.size());
    EXPECT_EQ(GetSync(*reopened, keys[k]).value, std::optional<uint64_t>(last)) << k;
  }
}

// Under async durability too, a key is judged, read and exported with its
// latest token, and a clean stop keeps them all (keys changed three times).
TEST(RocksDbStoreTest, AsyncKeysAreJudgedReadAndExportedWithTheirLatestToken) {
  TempDir dir;
  constexpr int kKeys = 100;
  auto key = [](int i) { return "/d/" + std::to_string(i); };
  {
    auto store = OpenRocks(dir.path(), Durability::kAsync);
    ASSERT_NE(store, nullptr);
    for (uint64_t round = 1; round <= 3; ++round) {
      for (int i = 0; i < kKeys; ++i) {
        ASSERT_TRUE(AdvanceSync(*store, key(i), round * 1000 + i).fence.accepted) << i;
      }
    }
    for (int i = 0; i < kKeys; ++i) {
      auto stale = AdvanceSync(*store, key(i), 3000 + i - 1);
      EXPECT_FALSE(stale.fence.accepted) << i;
      EXPECT_EQ(stale.fence.current, uint64_t{3000} + i) << i;
      EXPECT_EQ(GetSync(*store, key(i)).value, std::optional<uint64_t>(3000 + i)) << i;
    }
    std::vector<std::pair<std::string, uint64_t>> all;
    ASSERT_TRUE(store->ForEach([&all](const std::string& k, uint64_t token) {
      all.emplace_back(k, token);
      return true;
    }).ok());
    ASSERT_EQ(all.size(), size_t{kKeys});
    for (const auto& [k, token] : all) {
      EXPECT_EQ(token, 3000 + std::stoull(k.substr(3))) << k;
    }
    ASSERT_TRUE(store->Close().ok());
  }
  auto reopened = OpenRocks(dir.path(), Durability::kAsync);
  ASSERT_NE(reopened, nullptr);
  for (int i = 0; i < kKeys; ++i) {
    EXPECT_EQ(GetSync(*reopened, key(i)).value, std::optional<uint64_t>(3000 + i)) << i;
  }
}

// A rewrite of a key takes its place in the memtable (inplace_update_support)
// with either memtable: the hash of lists the store uses (memtable_buckets)
// and RocksDB's skiplist. Without it the memtable would hold one entry per
// write: 8,000 here.
TEST(RocksDbStoreTest, RewritesOfAKeyTakeItsPlaceInTheMemtable) {
  for (size_t buckets : {size_t{0}, RocksDbStoreOptions{}.memtable_buckets}) {
    SCOPED_TRACE("memtable_buckets " + std::to_string(buckets));
    TempDir dir;
    auto store = OpenRocks(dir.path(), Durability::kAsync, buckets);
    ASSERT_NE(store, nullptr);
    for (uint64_t token = 1; token <= 1000; ++token) {
      for (char c = 'a'; c < 'i'; ++c) {
        auto r = AdvanceSync(*store, std::string("/items/") + c, token);
        ASSERT_TRUE(r.status.ok() && r.fence.accepted) << r.status.ToString();
      }
    }
    EXPECT_EQ(store->MemtableEntries(), 8u);
    EXPECT_EQ(GetSync(*store, "/items/h").value, std::optional<uint64_t>(1000));
    EXPECT_EQ(GetSync(*store, "/items/i").value, std::nullopt);
    ASSERT_TRUE(store->Close().ok());
  }
}

// A data dir written with RocksDB's skiplist memtable (memtable_buckets 0)
// opens with the hash memtable: its WAL replays into it, and every token,
// old and new, reads back, refuses a stale write and exports.
TEST(RocksDbStoreTest, AStoreWrittenWithTheSkiplistMemtableOpensWithTheHashOne) {
  TempDir dir;
  {
    auto old = OpenRocks(dir.path(), Durability::kAsync, /*memtable_buckets=*/0);
    ASSERT_NE(old, nullptr);
    for (uint64_t k = 0; k < 100; ++k) {
      ASSERT_TRUE(AdvanceSync(*old, "/items/" + std::to_string(k), 10 + k).fence.accepted);
    }
    ASSERT_TRUE(old->Close().ok());
  }
  auto store = OpenRocks(dir.path(), Durability::kAsync);  // the hash memtable
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(AdvanceSync(*store, "/items/new", 5).fence.accepted);
  EXPECT_EQ(GetSync(*store, "/items/42").value, std::optional<uint64_t>(52));
  auto stale = AdvanceSync(*store, "/items/42", 51);
  EXPECT_FALSE(stale.fence.accepted);
  EXPECT_EQ(stale.fence.current, 52u);
  EXPECT_TRUE(AdvanceSync(*store, "/items/42", 60).fence.accepted);
  std::vector<std::pair<std::string, uint64_t>> all;
  ASSERT_TRUE(store->ForEach([&all](const std::string& key, uint64_t token) {
    all.emplace_back(key, token);
    return true;
  }).ok());
  ASSERT_EQ(all.size(), 101u);
  EXPECT_TRUE(std::is_sorted(all.begin(), all.end()));
  EXPECT_EQ(std::count(all.begin(), all.end(), std::pair<std::string, uint64_t>("/items/42", 60)),
            1);
  EXPECT_EQ(std::count(all.begin(), all.end(), std::pair<std::string, uint64_t>("/items/new", 5)),
            1);
}

TEST(RocksDbStoreTest, SyncAdvanceIsNeverDecidedOnTheCallersThread) {
  TempDir dir;
  auto store = OpenRocks(dir.path(), Durability::kSync);
  ASSERT_NE(store, nullptr);
  std::promise<std::thread::id> ran_on;
  store->Advance("k", 1, [&](const Status&, Fence) {
    ran_on.set_value(std::this_thread::get_id());
  });
  auto ran = ran_on.get_future();
  ASSERT_EQ(ran.wait_for(testing::kHandlerDeadline), std::future_status::ready);
  EXPECT_NE(ran.get(), std::this_thread::get_id());
  EXPECT_EQ(store->stats().caller_decided, 0u);
}

// An async store whose `key` holds `token` in a table file only: writing it,
// closing and reopening replays the WAL into a table file, and the new block
// cache is empty. (If RocksDB kept it in memory instead, the tests below
// would see it decided on the caller's thread and fail, not pass vacuously.)
std::unique_ptr<RocksDbStore> OpenWithTokenOnDiskOnly(const std::string& path,
                                                      const std::string& key, uint64_t token) {
  {
    auto store = OpenRocks(path, Durability::kAsync);
    if (store == nullptr || !AdvanceSync(*store, key, token).fence.accepted ||
        !store->Close().ok()) {
      ADD_FAILURE() << "could not store " << key << " = " << token;
      return nullptr;
    }
  }
  return OpenRocks(path, Durability::kAsync);
}

// A key whose value is only on disk (not in the memtable or the block cache)
// is never read on the caller's thread: the writer decides it, against the
// stored value, so a stale token is still refused.
TEST(RocksDbStoreTest, AsyncAdvanceOfAnUncachedKeyIsDecidedByTheWriter) {
  TempDir dir;
  auto store = OpenWithTokenOnDiskOnly(dir.path(), "k", 10);
  ASSERT_NE(store, nullptr);
  std::promise<std::pair<std::thread::id, Fence>> answer;
  store->Advance("k", 9, [&](const Status& s, Fence f) {
    EXPECT_TRUE(s.ok()) << s.ToString();
    answer.set_value({std::this_thread::get_id(), f});
  });
  auto answered = answer.get_future();
  ASSERT_EQ(answered.wait_for(testing::kHandlerDeadline), std::future_status::ready);
  auto [ran_on, fence] = answered.get();
  EXPECT_NE(ran_on, std::this_thread::get_id());
  EXPECT_FALSE(fence.accepted) << "a stale token was accepted";
  EXPECT_EQ(fence.current, 10u);
  EXPECT_EQ(store->stats().caller_decided, 0u);
  // The writer's read brought the block into the cache: once the writer
  // lets go of the lane (after its handler returned, so maybe not yet),
  // the caller decides.
  // A count of tries would depend on how soon the writer thread runs on a
  // loaded machine: try until a deadline instead.
  const auto deadline = std::chrono::steady_clock::now() + testing::kHandlerDeadline;
  while (store->stats().caller_decided == 0 && std::chrono::steady_clock::now() < deadline) {
    auto r = AdvanceSync(*store, "k", 11);
    ASSERT_TRUE(r.fence.accepted);
    std::this_thread::yield();  // let the writer run and let go of the lane
  }
  EXPECT_EQ(store->stats().caller_decided, 1u);
}

// Calls made while a caller decides (here: from inside its handler, which
// runs before it lets go) queue; that caller then decides them too, after
// its own, before its call returns.
TEST(RocksDbStoreTest, AsyncCallsQueuedWhileACallerDecidesAreTakenByIt) {
  TempDir dir;
  auto store = OpenRocks(dir.path(), Durability::kAsync);
  ASSERT_NE(store, nullptr);
  std::optional<std::pair<std::thread::id, Fence>> inner;
  bool outer_ran = false;
  store->Advance("k", 5, [&](const Status&, Fence) {
    outer_ran = true;
    store->Advance("k", 4, [&](const Status& s, Fence f) {
      EXPECT_TRUE(s.ok()) << s.ToString();
      inner.emplace(std::this_thread::get_id(), f);
    });
    EXPECT_FALSE(inner.has_value()) << "decided while the outer call held the lane";
  });
  ASSERT_TRUE(outer_ran);
  ASSERT_TRUE(inner.has_value()) << "the queued call was left for the writer";
  EXPECT_EQ(inner->first, std::this_thread::get_id());
  EXPECT_FALSE(inner->second.accepted);  // judged after 5
  EXPECT_EQ(inner->second.current, 5u);
  EXPECT_EQ(store->stats().caller_decided, 2u);
  EXPECT_EQ(store->stats().requests, 2u);
}

// A queued batch that a caller would have to read from disk goes back, in
// order, to the writer thread.
TEST(RocksDbStoreTest, AsyncQueuedCallOnAnUncachedKeyGoesBackToTheWriter) {
  TempDir dir;
  auto store = OpenWithTokenOnDiskOnly(dir.path(), "k", 10);
  ASSERT_NE(store, nullptr);
  std::promise<std::pair<std::thread::id, Fence>> inner;
  store->Advance("other", 1, [&](const Status&, Fence) {
    store->Advance("k", 9, [&](const Status& s, Fence f) {
      EXPECT_TRUE(s.ok()) << s.ToString();
      inner.set_value({std::this_thread::get_id(), f});
    });
  });
  auto answered = inner.get_future();
  ASSERT_EQ(answered.wait_for(testing::kHandlerDeadline), std::future_status::ready)
      << "the batch was not handed back to the writer";
  auto [ran_on, fence] = answered.get();
  EXPECT_NE(ran_on, std::this_thread::get_id());
  EXPECT_FALSE(fence.accepted) << "a stale token was accepted";
  EXPECT_EQ(fence.current, 10u);
  EXPECT_EQ(store->stats().caller_decided, 1u);  // "other" only
}

TEST(RocksDbStoreTest, GetDoesNotWaitForTheWriter) {
  TempDir dir;
  auto store = OpenRocks(dir.path());
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(AdvanceSync(*store, "k", 4).status.ok());

  // Park the writer inside a handler; reads must still be served.
  std::promise<void> entered, release;
  std::shared_future<void> released = release.get_future().share();
  store->Advance("other", 1, [&entered, released](const Status&, Fence) {
    entered.set_value();
    released.wait();
  });
  entered.get_future().wait();
  auto g = GetSync(*store, "k");
  release.set_value();
  ASSERT_TRUE(g.status.ok()) << g.status.ToString();
  EXPECT_EQ(g.value, 4u);
}

TEST(RocksDbStoreTest, StatsCountRequestsAndWrites) {
  TempDir dir;
  auto store = OpenRocks(dir.path());
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(AdvanceSync(*store, "k", 5).status.ok());
  ASSERT_TRUE(AdvanceSync(*store, "k", 5).status.ok());  // no change
  ASSERT_TRUE(AdvanceSync(*store, "k", 4).status.ok());  // refused
  StoreStats s = store->stats();
  EXPECT_EQ(s.requests, 3u);
  EXPECT_EQ(s.batches, 3u);
  EXPECT_EQ(s.writes, 1u);
  EXPECT_EQ(s.db_writes, 1u);
  EXPECT_EQ(s.syncs, 1u);
  EXPECT_EQ(s.write_errors, 0u);
}

// Decide fills one WriteBatch from batch to batch (and replaces one that grew
// past 64 KiB): each DB write carries its own batch's changes and nothing of
// the batches before it. Concurrent writes of 1 KB keys under sync
// durability make batches of many requests while an fsync runs, bigger than
// 64 KiB when 65 or more meet; then single writes follow.
TEST(RocksDbStoreTest, EachWriteCarriesOnlyItsOwnBatchsChanges) {
  TempDir dir;
  constexpr int kKeys = 300;
  auto key = [](int i) { return std::to_string(i) + std::string(1000, 'k'); };
  {
    auto store = OpenRocks(dir.path(), Durability::kSync);
    ASSERT_NE(store, nullptr);
    std::vector<std::future<testing::FenceResult>> answers;
    for (int i = 0; i < kKeys; ++i) {
      auto p = std::make_shared<std::promise<testing::FenceResult>>();
      answers.push_back(p->get_future());
      store->Advance(key(i), 1000 + i, [p](const Status& s, Fence f) {
        p->set_value(testing::FenceResult{s, f});
      });
    }
    for (auto& a : answers) {
      auto r = testing::WaitFor(a, testing::FenceResult{Status::Unavailable("deadline"), {}});
      ASSERT_TRUE(r.status.ok()) << r.status.ToString();
      ASSERT_TRUE(r.fence.accepted);
    }
    StoreStats after_burst = store->stats();
    EXPECT_EQ(after_burst.writes, uint64_t{kKeys});
    EXPECT_LT(after_burst.db_writes, uint64_t{kKeys}) << "no batch held more than one write";
    // One at a time now: a stale token (nothing written), a raise, a new key.
    EXPECT_FALSE(AdvanceSync(*store, key(0), 999).fence.accepted);
    EXPECT_TRUE(AdvanceSync(*store, key(1), 5000).fence.accepted);
    EXPECT_TRUE(AdvanceSync(*store, "new", 7).fence.accepted);
    StoreStats s = store->stats();
    EXPECT_EQ(s.writes, uint64_t{kKeys} + 2);
    EXPECT_EQ(s.db_writes, after_burst.db_writes + 2);
    ASSERT_TRUE(store->Close().ok());
  }
  auto reopened = OpenRocks(dir.path());
  ASSERT_NE(reopened, nullptr);
  EXPECT_EQ(GetSync(*reopened, key(0)).value, std::optional<uint64_t>(1000));
  EXPECT_EQ(GetSync(*reopened, key(1)).value, std::optional<uint64_t>(5000));
  EXPECT_EQ(GetSync(*reopened, key(kKeys - 1)).value, std::optional<uint64_t>(1000 + kKeys - 1));
  EXPECT_EQ(GetSync(*reopened, "new").value, std::optional<uint64_t>(7));
}

}  // namespace
}  // namespace fencegate::storage
