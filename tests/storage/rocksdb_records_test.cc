// The RocksDB engine's idempotency records beyond the shared contract
// (idempotency_store_contract_test.cc): they survive a restart, they stay
// apart from the tokens, and compactions drop the expired ones.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <future>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <rocksdb/db.h>

#include "storage/idempotency_store.h"
#include "storage/rocksdb_options.h"
#include "storage/rocksdb_store.h"
#include "tests/storage/test_util.h"

namespace fencegate::storage {
namespace {

using testing::AdvanceSync;
using testing::GetSync;
using testing::OpenRocks;
using testing::TempDir;
using State = IdempotencyRecord::State;

int64_t WallMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

IdempotencyRecord Reserved(uint64_t owner, int64_t created, int64_t expires) {
  IdempotencyRecord r;
  r.state = State::kReserved;
  r.owner = owner;
  r.created_ms = created;
  r.expires_ms = expires;
  r.head_digest = std::string(kDigestBytes, 'h');
  return r;
}

IdempotencyRecord Finished(uint64_t owner, int64_t created, int64_t expires) {
  IdempotencyRecord r = Reserved(owner, created, expires);
  r.state = State::kFinished;
  r.body_digest = std::string(kDigestBytes, 'b');
  r.response.status = 200;
  r.response.headers = {{"Content-Type", "text/plain"}};
  r.response.body = std::string(3000, 'x');
  r.response.body_bytes = 3000;
  return r;
}

bool Reserve(IdempotencyStore& s, const std::string& key, IdempotencyRecord r) {
  std::promise<std::pair<Status, Reservation>> p;
  s.ReserveKey(key, std::move(r), [&](const Status& st, Reservation a) {
    p.set_value({st, std::move(a)});
  });
  auto [st, a] = p.get_future().get();
  EXPECT_TRUE(st.ok()) << st.ToString();
  return a.reserved;
}

bool Finish(IdempotencyStore& s, const std::string& key, IdempotencyRecord r, int64_t now) {
  std::promise<std::pair<Status, bool>> p;
  s.FinishKey(key, std::move(r), now, [&](const Status& st, bool a) { p.set_value({st, a}); });
  auto [st, applied] = p.get_future().get();
  EXPECT_TRUE(st.ok()) << st.ToString();
  return applied;
}

std::optional<IdempotencyRecord> Lookup(IdempotencyStore& s, const std::string& key, int64_t now) {
  std::promise<std::pair<Status, std::optional<IdempotencyRecord>>> p;
  s.LookupKey(key, now, [&](const Status& st, std::optional<IdempotencyRecord> r) {
    p.set_value({st, std::move(r)});
  });
  auto [st, r] = p.get_future().get();
  EXPECT_TRUE(st.ok()) << st.ToString();
  return r;
}

class RocksDbRecords : public ::testing::TestWithParam<Durability> {
 protected:
  std::string Path() const { return dir_.path() + "/db"; }
  TempDir dir_;
};

TEST_P(RocksDbRecords, RecordsSurviveARestart) {
  const int64_t now = 1'780'000'000'000;
  {
    auto store = OpenRocks(Path(), GetParam());
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(Reserve(*store, "running", Reserved(1, now, now + 60'000)));
    ASSERT_TRUE(Reserve(*store, "done", Reserved(2, now, now + 60'000)));
    ASSERT_TRUE(Finish(*store, "done", Finished(2, now, now + 86'400'000), now));
    ASSERT_TRUE(store->Close().ok());
  }
  auto store = OpenRocks(Path(), GetParam());
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(Lookup(*store, "running", now), Reserved(1, now, now + 60'000));
  EXPECT_EQ(Lookup(*store, "done", now), Finished(2, now, now + 86'400'000));
  EXPECT_FALSE(Reserve(*store, "done", Reserved(3, now + 1, now + 60'001)));
}

TEST_P(RocksDbRecords, ARecordAndATokenUnderOneNameAreTwoThings) {
  // Token keys cannot take the records' prefix (the token store contract
  // shows it); the names a caller gives records and tokens never meet.
  auto store = OpenRocks(Path(), GetParam());
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(Reserve(*store, "k", Reserved(1, 1, 2)));
  EXPECT_TRUE(AdvanceSync(*store, "k", 7).fence.accepted);
  EXPECT_EQ(GetSync(*store, "k").value, 7u);
  EXPECT_EQ(Lookup(*store, "k", 1), Reserved(1, 1, 2));
}

TEST_P(RocksDbRecords, TheTokenScanSkipsRecords) {
  auto store = OpenRocks(Path(), GetParam());
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(Reserve(*store, "k", Reserved(1, 1, 2)));
  ASSERT_TRUE(AdvanceSync(*store, "a", 5).fence.accepted);
  std::vector<std::pair<std::string, uint64_t>> seen;
  ASSERT_TRUE(store->ForEach([&](const std::string& key, uint64_t token) {
                     seen.emplace_back(key, token);
                     return true;
                   }).ok());
  EXPECT_EQ(seen, (std::vector<std::pair<std::string, uint64_t>>{{"a", 5}}));
}

TEST_P(RocksDbRecords, ACompactionDropsExpiredRecordsAndKeepsTheRest) {
  const int64_t wall = WallMs();
  {
    auto store = OpenRocks(Path(), GetParam());
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(AdvanceSync(*store, "token", 9).fence.accepted);
    for (int i = 0; i < 100; ++i) {
      const std::string key = "old-" + std::to_string(i);
      ASSERT_TRUE(Reserve(*store, key, Reserved(1, wall - 120'000, wall - 60'000)));
      ASSERT_TRUE(Finish(*store, key, Finished(1, wall - 120'000, wall - 60'000), wall - 119'000));
    }
    ASSERT_TRUE(Reserve(*store, "live", Reserved(2, wall, wall + 3'600'000)));
    ASSERT_TRUE(store->Close().ok());
  }
  // The store's own options, so that its compaction filter runs.
  RocksDbStoreOptions options;
  options.path = Path();
  rocksdb::DB* raw = nullptr;
  ASSERT_TRUE(rocksdb::DB::Open(rocksdb_support::MakeOptions(options), Path(), &raw).ok());
  std::unique_ptr<rocksdb::DB> db(raw);
  ASSERT_TRUE(db->CompactRange(rocksdb::CompactRangeOptions{}, nullptr, nullptr).ok());
  rocksdb::ReadOptions ro;
  ro.total_order_seek = true;
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(ro));
  std::vector<std::string> keys;
  for (it->SeekToFirst(); it->Valid(); it->Next()) keys.push_back(it->key().ToString());
  ASSERT_TRUE(it->status().ok());
  EXPECT_EQ(keys, (std::vector<std::string>{std::string("\0ilive", 6), "token"}));
}

// A finished record whose body does not compress: what it takes on disk
// is what it holds.
IdempotencyRecord FinishedIncompressible(uint64_t owner, int64_t created, int64_t expires,
                                         uint32_t seed) {
  IdempotencyRecord r = Finished(owner, created, expires);
  std::mt19937 bytes(seed);
  for (char& c : r.response.body) c = static_cast<char>(bytes());
  return r;
}

// Bytes of table files in dir: what the records take on disk once flushed.
uint64_t TableBytes(const std::string& dir) {
  uint64_t bytes = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".sst") continue;
    std::error_code gone;  // deleted by a compaction since it was listed: 0
    const uintmax_t size = entry.file_size(gone);
    if (!gone) bytes += size;
  }
  return bytes;
}

// A store whose records compaction runs every `interval` (0: never),
// holding 150 expired records of keys that only grow ("order-000000", ...)
// in a few table files, below L0's compaction trigger.
std::unique_ptr<RocksDbStore> OpenWithExpiredGrowingKeys(const std::string& path,
                                                         Durability durability,
                                                         std::chrono::milliseconds interval,
                                                         int64_t wall) {
  RocksDbStoreOptions options;
  options.path = path;
  options.durability = durability;
  options.wal_bytes_per_flush = 200u << 10;
  options.records_compaction_interval = interval;
  std::unique_ptr<RocksDbStore> store;
  EXPECT_TRUE(RocksDbStore::Open(options, &store).ok());
  if (store == nullptr) return nullptr;
  for (int i = 0; i < 150; ++i) {
    char key[32];
    std::snprintf(key, sizeof key, "order-%06d", i);
    EXPECT_TRUE(Reserve(*store, key, Reserved(1, wall - 120'000, wall - 60'000)));
    EXPECT_TRUE(Finish(*store, key, FinishedIncompressible(1, wall - 120'000, wall - 60'000, i),
                       wall - 119'000));
  }
  return store;
}

// Keys that only grow (order numbers, ULIDs) are never overlapped by newer
// writes, so RocksDB alone would not rewrite their files for 30 days; the
// store compacts the records' range itself, every
// records_compaction_interval, and the expired ones leave the disk.
TEST_P(RocksDbRecords, ExpiredRecordsOfGrowingKeysLeaveTheDiskWithinTheInterval) {
  const int64_t wall = WallMs();
  auto store = OpenWithExpiredGrowingKeys(Path(), GetParam(), std::chrono::milliseconds(100), wall);
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(Reserve(*store, "order-live", Reserved(2, wall, wall + 3'600'000)));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (store->record_compactions() == 0 || TableBytes(Path()) > (64u << 10)) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline)
        << TableBytes(Path()) << " bytes of table files left";
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling with a deadline
  }
  EXPECT_EQ(Lookup(*store, "order-live", wall), Reserved(2, wall, wall + 3'600'000));
}

// The same without the store's compactions: the expired records stay.
TEST_P(RocksDbRecords, WithoutTheIntervalExpiredRecordsOfGrowingKeysStay) {
  auto store = OpenWithExpiredGrowingKeys(Path(), GetParam(), std::chrono::milliseconds(0),
                                          WallMs());
  ASSERT_NE(store, nullptr);
  // Five times the other test's interval: long enough for its compactor to
  // have run, had there been one.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_GT(TableBytes(Path()), 200u << 10);
  EXPECT_EQ(store->record_compactions(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Durabilities, RocksDbRecords,
                         ::testing::Values(Durability::kSync, Durability::kAsync),
                         [](const auto& info) {
                           return info.param == Durability::kSync ? "Sync" : "Async";
                         });

}  // namespace
}  // namespace fencegate::storage
