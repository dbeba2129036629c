// RocksDbStore when the disk fails: a file system that fails writes on
// demand (as LevelDB's fault-injection Env does) sits under RocksDB.

#include <atomic>
#include <chrono>
#include <thread>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/io_status.h>

#include "storage/rocksdb_store.h"
#include "tests/storage/test_util.h"

namespace fencegate::storage {
namespace {

using rocksdb::IODebugContext;
using rocksdb::IOOptions;
using rocksdb::IOStatus;
using testing::AdvanceAllSync;
using testing::AdvanceSync;
using testing::GetSync;
using testing::OpenRocks;
using testing::RaiseSync;
using testing::TempDir;

// kSyncFails: data reaches the file (the page cache), its fsync fails.
// kWalSyncFails: the same for RocksDB's WAL files (*.log) only.
// kTableFilesFail: no table file (*.sst) can be created, so RocksDB's
// flushes fail; every other file works (the WAL among them).
enum class DiskFault { kNone, kNoSpace, kIoError, kSyncFails, kWalSyncFails, kTableFilesFail };

bool EndsWith(const std::string& name, std::string_view suffix) {
  return name.size() >= suffix.size() &&
         name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool FailsWrites(DiskFault fault) {
  return fault == DiskFault::kNoSpace || fault == DiskFault::kIoError;
}

IOStatus Injected(DiskFault fault) {
  if (fault == DiskFault::kNoSpace) return IOStatus::NoSpace("injected");
  return IOStatus::IOError("injected disk failure");
}

class FailingFile : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  FailingFile(std::unique_ptr<rocksdb::FSWritableFile> file,
              const std::atomic<DiskFault>* fault, bool wal, std::atomic<int>* wal_sync_failures)
      : FSWritableFileOwnerWrapper(std::move(file)),
        fault_(fault),
        wal_(wal),
        wal_sync_failures_(wal_sync_failures) {}

  IOStatus Append(const rocksdb::Slice& data, const IOOptions& o,
                  IODebugContext* d) override {
    if (DiskFault f = fault_->load(); FailsWrites(f)) return Injected(f);
    return FSWritableFileOwnerWrapper::Append(data, o, d);
  }
  IOStatus Append(const rocksdb::Slice& data, const IOOptions& o,
                  const rocksdb::DataVerificationInfo& v,
                  IODebugContext* d) override {
    if (DiskFault f = fault_->load(); FailsWrites(f)) return Injected(f);
    return FSWritableFileOwnerWrapper::Append(data, o, v, d);
  }
  IOStatus Sync(const IOOptions& o, IODebugContext* d) override {
    if (SyncFails()) return Injected(fault_->load());
    return FSWritableFileOwnerWrapper::Sync(o, d);
  }
  IOStatus Fsync(const IOOptions& o, IODebugContext* d) override {
    if (SyncFails()) return Injected(fault_->load());
    return FSWritableFileOwnerWrapper::Fsync(o, d);
  }

 private:
  bool SyncFails() const {
    const DiskFault f = fault_->load();
    if (f == DiskFault::kWalSyncFails) {
      if (wal_) ++*wal_sync_failures_;
      return wal_;
    }
    return f != DiskFault::kNone && f != DiskFault::kTableFilesFail;
  }

  const std::atomic<DiskFault>* fault_;
  const bool wal_;
  std::atomic<int>* wal_sync_failures_;
};

class FailingFs : public rocksdb::FileSystemWrapper {
 public:
  FailingFs() : FileSystemWrapper(rocksdb::FileSystem::Default()) {}
  const char* Name() const override { return "FailingFs"; }

  IOStatus NewWritableFile(const std::string& name,
                           const rocksdb::FileOptions& options,
                           std::unique_ptr<rocksdb::FSWritableFile>* result,
                           IODebugContext* dbg) override {
    if (DiskFault f = fault.load(); FailsWrites(f)) return Injected(f);
    if (fault.load() == DiskFault::kTableFilesFail && EndsWith(name, ".sst")) {
      ++table_file_failures;
      return IOStatus::IOError("injected: cannot create a table file");
    }
    std::unique_ptr<rocksdb::FSWritableFile> file;
    IOStatus s = target()->NewWritableFile(name, options, &file, dbg);
    const bool wal = EndsWith(name, ".log");
    if (s.ok()) result->reset(new FailingFile(std::move(file), &fault, wal, &wal_sync_failures));
    return s;
  }

  std::atomic<DiskFault> fault{DiskFault::kNone};
  std::atomic<int> wal_sync_failures{0};  // WAL syncs failed by kWalSyncFails
  std::atomic<int> table_file_failures{0};  // table files refused by kTableFilesFail
};

// Each fault under both durabilities: under async the first failing write is
// decided on the caller's thread (rocksdb_store.h), and the writer thread
// must still take over the recovery.
class RocksDbStoreFailureTest
    : public ::testing::TestWithParam<std::tuple<DiskFault, Durability>> {
 protected:
  void SetUp() override {
    fs_ = std::make_shared<FailingFs>();
    env_ = rocksdb::NewCompositeEnv(fs_);
  }
  void TearDown() override {
    fs_->fault = DiskFault::kNone;
    if (store_) (void)store_->Close();
  }

  void OpenStore(std::chrono::milliseconds recovery_interval) {
    RocksDbStoreOptions options;
    options.path = dir_.path();
    options.env = env_.get();
    options.recovery_interval = recovery_interval;
    options.durability = std::get<1>(GetParam());
    Status s = RocksDbStore::Open(options, &store_);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  DiskFault Fault() const { return std::get<0>(GetParam()); }

  // Waits until Health() is ok; the writer retries every recovery_interval.
  bool WaitHealthy() {
    auto deadline = std::chrono::steady_clock::now() + testing::kHandlerDeadline;
    while (!store_->Health().ok()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
  }

  TempDir dir_;
  std::shared_ptr<FailingFs> fs_;
  std::unique_ptr<rocksdb::Env> env_;  // outlives store_ (declared before)
  std::unique_ptr<RocksDbStore> store_;
};

TEST_P(RocksDbStoreFailureTest, FailedWriteRefusesTheBatchAndRecovers) {
  // A long interval: recovery here comes from the next batch, not the timer.
  OpenStore(std::chrono::hours(1));
  ASSERT_TRUE(AdvanceSync(*store_, "k", 5).fence.accepted);
  ASSERT_TRUE(store_->Health().ok());

  fs_->fault = Fault();
  auto r = AdvanceSync(*store_, "k", 9);
  EXPECT_EQ(r.status.code(), Status::Code::kIoError) << r.status.ToString();
  EXPECT_EQ(RaiseSync(*store_, "k", 10).status.code(),
            Status::Code::kIoError);
  // Even a request that needs no write is not answered "accepted" while the
  // store cannot write.
  EXPECT_FALSE(AdvanceSync(*store_, "k", 5).status.ok());
  Status health = store_->Health();
  EXPECT_EQ(health.code(), Status::Code::kIoError) << health.ToString();
  EXPECT_GE(store_->stats().write_errors, 1u);
  // The refused token was not acknowledged; reads still see the old value.
  EXPECT_EQ(GetSync(*store_, "k").value, 5u);

  fs_->fault = DiskFault::kNone;  // the disk recovers; no restart
  r = AdvanceSync(*store_, "k", 9);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_TRUE(r.fence.accepted);
  EXPECT_EQ(r.fence.current, 9u);
  EXPECT_TRUE(store_->Health().ok());
  EXPECT_FALSE(AdvanceSync(*store_, "k", 8).fence.accepted);
  // RocksDB 7.8 treats a failed WAL append as fatal to the open database
  // (DB::Resume() refuses), under either durability: the writer reopened
  // it, once.
  EXPECT_EQ(store_->stats().reopens, 1u);
  ASSERT_TRUE(store_->Close().ok());

  auto reopened = OpenRocks(dir_.path());
  ASSERT_NE(reopened, nullptr);
  EXPECT_EQ(GetSync(*reopened, "k").value, 9u);
}

// A failed write fails every AdvanceAll of its batch whole: no key of it is
// stored, and after the recovery the batch goes in whole.
TEST_P(RocksDbStoreFailureTest, AFailedWriteFailsAWholeBatchOfKeys) {
  OpenStore(std::chrono::hours(1));
  ASSERT_TRUE(AdvanceAllSync(*store_, {{"a", 5}, {"b", 5}}).fence.accepted);

  fs_->fault = Fault();
  auto r = AdvanceAllSync(*store_, {{"a", 9}, {"b", 9}, {"c", 9}});
  EXPECT_EQ(r.status.code(), Status::Code::kIoError) << r.status.ToString();
  EXPECT_FALSE(r.fence.accepted);
  EXPECT_EQ(GetSync(*store_, "a").value, 5u);
  EXPECT_EQ(GetSync(*store_, "b").value, 5u);
  EXPECT_EQ(GetSync(*store_, "c").value, std::nullopt);

  fs_->fault = DiskFault::kNone;
  r = AdvanceAllSync(*store_, {{"a", 9}, {"b", 9}, {"c", 9}});
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_TRUE(r.fence.accepted);
  ASSERT_TRUE(store_->Close().ok());
  auto reopened = OpenRocks(dir_.path());
  ASSERT_NE(reopened, nullptr);
  for (const char* key : {"a", "b", "c"}) EXPECT_EQ(GetSync(*reopened, key).value, 9u) << key;
}

TEST_P(RocksDbStoreFailureTest, IdleStoreRecoversWithoutTraffic) {
  OpenStore(std::chrono::milliseconds(10));
  ASSERT_TRUE(AdvanceSync(*store_, "k", 5).fence.accepted);
  fs_->fault = Fault();
  EXPECT_FALSE(AdvanceSync(*store_, "k", 6).status.ok());
  EXPECT_FALSE(store_->Health().ok());

  fs_->fault = DiskFault::kNone;
  ASSERT_TRUE(WaitHealthy()) << store_->Health().ToString();
  auto r = AdvanceSync(*store_, "k", 7);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(r.fence.current, 7u);
}

TEST_P(RocksDbStoreFailureTest, CloseWhileTheDiskFailsReportsTheError) {
  OpenStore(std::chrono::milliseconds(10));
  ASSERT_TRUE(AdvanceSync(*store_, "k", 5).fence.accepted);
  fs_->fault = Fault();
  EXPECT_FALSE(AdvanceSync(*store_, "k", 6).status.ok());
  Status closed = store_->Close();
  EXPECT_EQ(closed.code(), Status::Code::kIoError) << closed.ToString();
  fs_->fault = DiskFault::kNone;

  auto reopened = OpenRocks(dir_.path());
  ASSERT_NE(reopened, nullptr);
  auto g = GetSync(*reopened, "k");
  ASSERT_TRUE(g.status.ok());
  // 5 was acknowledged; 6 was not, but its WAL record may have survived.
  ASSERT_TRUE(g.value.has_value());
  EXPECT_GE(*g.value, 5u);
}

INSTANTIATE_TEST_SUITE_P(
    Faults, RocksDbStoreFailureTest,
    ::testing::Combine(::testing::Values(DiskFault::kNoSpace, DiskFault::kIoError),
                       ::testing::Values(Durability::kSync, Durability::kAsync)),
    [](const auto& info) {
      std::string name = std::get<0>(info.param) == DiskFault::kNoSpace ? "NoSpace" : "IoError";
      return name + (std::get<1>(info.param) == Durability::kSync ? "Sync" : "Async");
    });

// A store over FailingFs, for the tests outside the fixture. Members in
// this order: the store closes before the file system under it goes.
struct StoreOnFailingFs {
  StoreOnFailingFs(Durability durability, std::chrono::milliseconds recovery_interval,
                   RocksDbStoreOptions options = {}) {
    options.path = dir.path();
    options.env = env.get();
    options.recovery_interval = recovery_interval;
    options.durability = durability;
    Status s = RocksDbStore::Open(options, &store);
    EXPECT_TRUE(s.ok()) << s.ToString();
  }

  std::shared_ptr<FailingFs> fs = std::make_shared<FailingFs>();
  std::unique_ptr<rocksdb::Env> env = rocksdb::NewCompositeEnv(fs);
  TempDir dir;
  std::unique_ptr<RocksDbStore> store;
};

// A synced write whose fsync failed is refused, but its WAL record is in the
// file (the page cache), and the reopen that recovers the store replays it:
// from then on the store decides against that token, never against the
// value from before the failure (rocksdb_store.h, "Failure": such a write
// may show up after a reopen, and stored tokens only go up).
TEST(RocksDbStoreSyncFailure, ARefusedWriteThatTheReopenReplaysCounts) {
  StoreOnFailingFs on(Durability::kSync, std::chrono::hours(1));
  ASSERT_NE(on.store, nullptr);
  FailingFs* fs = on.fs.get();
  RocksDbStore* store = on.store.get();
  ASSERT_TRUE(AdvanceSync(*store, "k", 5).fence.accepted);

  fs->fault = DiskFault::kSyncFails;
  EXPECT_FALSE(AdvanceSync(*store, "k", 9).status.ok());
  fs->fault = DiskFault::kNone;

  auto r = AdvanceSync(*store, "k", 7);  // recovers first: reopen, WAL replay
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(store->stats().reopens, 1u);
  EXPECT_FALSE(r.fence.accepted) << "7 accepted over the replayed 9";
  EXPECT_EQ(r.fence.current, 9u);
  // A write that succeeds ends the failed state (a refusal writes nothing).
  EXPECT_TRUE(AdvanceSync(*store, "k", 10).fence.accepted);
  Status closed = store->Close();
  EXPECT_TRUE(closed.ok()) << closed.ToString();
}

// Under async a token the store acknowledged may be only in RocksDB's
// memtable and its WAL, unsynced. When recovery has to reopen the database
// (RocksDB refuses DB::Resume() after its WAL failed to sync: here the
// idle writer's probe, an empty synced write), the broken database closes
// without flushing its memtable, and the WAL's records, in the file though
// never synced, bring those tokens back into the new one.
TEST(RocksDbStoreAsyncFailure, AReopenDuringRecoveryKeepsAcknowledgedTokens) {
  StoreOnFailingFs on(Durability::kAsync, std::chrono::milliseconds(10));
  ASSERT_NE(on.store, nullptr);
  FailingFs* fs = on.fs.get();
  RocksDbStore* store = on.store.get();
  constexpr int kKeys = 50;
  for (int i = 0; i < kKeys; ++i) {
    ASSERT_TRUE(AdvanceSync(*store, "k" + std::to_string(i), 10 + i).fence.accepted);
  }

  fs->fault = DiskFault::kIoError;  // the WAL's append fails
  EXPECT_FALSE(AdvanceSync(*store, "k0", 100).status.ok());
  fs->fault = DiskFault::kWalSyncFails;  // then the recovery's probe
  auto deadline = std::chrono::steady_clock::now() + testing::kHandlerDeadline;
  while (fs->wal_sync_failures.load() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_GT(fs->wal_sync_failures.load(), 0);
  fs->fault = DiskFault::kNone;

  auto r = AdvanceSync(*store, "k1", 5);  // recovers first: a reopen
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_GE(store->stats().reopens, 1u);
  EXPECT_FALSE(r.fence.accepted);
  EXPECT_EQ(r.fence.current, 11u);
  for (int i = 0; i < kKeys; ++i) {
    EXPECT_EQ(GetSync(*store, "k" + std::to_string(i)).value,
              std::optional<uint64_t>(10 + i))
        << i;
  }
  // A write that succeeds ends the failed state (a refusal writes nothing).
  EXPECT_TRUE(AdvanceSync(*store, "k1", 12).fence.accepted);
  Status closed = store->Close();
  EXPECT_TRUE(closed.ok()) << closed.ToString();
}

// Under async the writer asks RocksDB for a memtable switch every
// wal_bytes_per_flush WAL bytes (FlushIfDue). When writes fail (here
// RocksDB stops taking them after a flush of table files failed), the
// switch stays due while the store recovers. The writer must then wait out
// its recovery timer, not take the due switch again and again (it cannot
// do it while the write fails): with the guard in LaneReleasedLocked taken
// out, the writer loops on the switch, never reaches its idle recovery,
// and Health() stays failed after the disk is back.
TEST(RocksDbStoreAsyncFailure, ASwitchDueWhenAWriteFailsWaitsForTheRecovery) {
  RocksDbStoreOptions options;
  options.wal_bytes_per_flush = 2048;
  StoreOnFailingFs on(Durability::kAsync, std::chrono::milliseconds(10), options);
  ASSERT_NE(on.store, nullptr);
  FailingFs* fs = on.fs.get();
  RocksDbStore* store = on.store.get();

  fs->fault = DiskFault::kTableFilesFail;
  // A switch's flush fails in the background and RocksDB stops taking
  // writes: from there every write answers the error.
  std::vector<std::pair<std::string, uint64_t>> acknowledged;  // key, token
  // Until a write fails: the failing flush runs on RocksDB's background
  // thread, later on a loaded machine (bounded by the deadline).
  const auto fail_by = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (int i = 0; store->stats().write_errors == 0 && std::chrono::steady_clock::now() < fail_by;
       ++i) {
    std::string key = "k" + std::to_string(i);
    const uint64_t token = 100 + i;
    auto r = AdvanceSync(*store, key, token);
    if (r.status.ok()) {
      ASSERT_TRUE(r.fence.accepted);
      acknowledged.emplace_back(std::move(key), token);
    }
  }
  ASSERT_GE(store->stats().write_errors, 1u) << "no write failed";
  ASSERT_GT(fs->table_file_failures.load(), 0);
  const uint64_t switches = store->stats().flushes;
  EXPECT_GE(switches, 1u);
  EXPECT_FALSE(AdvanceSync(*store, "late", 1).status.ok());
  EXPECT_FALSE(store->Health().ok());

  fs->fault = DiskFault::kNone;  // no traffic from here to the recovery
  auto deadline = std::chrono::steady_clock::now() + testing::kHandlerDeadline;
  while (!store->Health().ok() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(store->Health().ok()) << store->Health().ToString();

  // After the recovery writes go on (several switches' worth of WAL), and
  // so do the switches: the writer takes a due switch when the lane is
  // free, which the writes here may keep it from until they stop.
  constexpr int kAfter = 300;
  for (int i = 0; i < kAfter; ++i) {
    ASSERT_TRUE(AdvanceSync(*store, "after" + std::to_string(i), 7).fence.accepted) << i;
  }
  while (store->stats().flushes == switches && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_GT(store->stats().flushes, switches);
  for (const auto& [key, token] : acknowledged) {
    EXPECT_EQ(GetSync(*store, key).value, std::optional<uint64_t>(token)) << key;
  }
  Status closed = store->Close();
  ASSERT_TRUE(closed.ok()) << closed.ToString();

  auto reopened = OpenRocks(on.dir.path());
  ASSERT_NE(reopened, nullptr);
  for (const auto& [key, token] : acknowledged) {
    EXPECT_EQ(GetSync(*reopened, key).value, std::optional<uint64_t>(token)) << key;
  }
  for (int i = 0; i < kAfter; ++i) {
    EXPECT_EQ(GetSync(*reopened, "after" + std::to_string(i)).value, std::optional<uint64_t>(7))
        << i;
  }
}

}  // namespace
}  // namespace fencegate::storage
