// RocksDbStore::Open and damaged data: lock held by another process,
// corrupt values, partial or damaged directories, a writer killed mid-run.

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <rocksdb/db.h>

#include "storage/rocksdb_store.h"
#include "tests/storage/test_util.h"

extern char** environ;

namespace fencegate::storage {
namespace {

using testing::AdvanceSync;
using testing::GetSync;
using testing::OpenRocks;
using testing::RaiseSync;
using testing::TempDir;

constexpr char kLockHolderEnv[] = "FENCEGATE_TEST_LOCK_HOLDER_DIR";

Status TryOpen(const std::string& path) {
  RocksDbStoreOptions options;
  options.path = path;
  std::unique_ptr<RocksDbStore> store;
  return RocksDbStore::Open(options, &store);
}

// Not a test on its own: the child half of OtherProcessHoldsTheLock. Opens
// the store named by the environment, prints "ready", holds the store until
// stdin closes.
TEST(RocksDbStoreOpenTest, LockHolderChild) {
  const char* dir = std::getenv(kLockHolderEnv);
  if (dir == nullptr) GTEST_SKIP() << "helper for OtherProcessHoldsTheLock";
  auto store = OpenRocks(dir);
  ASSERT_NE(store, nullptr);
  std::printf("ready\n");
  std::fflush(stdout);
  char c;
  while (read(STDIN_FILENO, &c, 1) > 0) {
  }
  EXPECT_TRUE(store->Close().ok());
}

// This test binary run again as a child with only `test` selected and
// `env_entry` added to its environment; its stdin and stdout are pipes.
struct Child {
  pid_t pid = -1;
  int to_child = -1;    // its stdin
  int from_child = -1;  // its stdout
};

Child SpawnSelf(const std::string& test, const std::string& env_entry) {
  Child child;
  std::string entry = env_entry;  // execve wants char*
  int to_child[2], from_child[2];
  if (pipe(to_child) != 0 || pipe(from_child) != 0) {
    ADD_FAILURE() << "pipe failed";
    return child;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, to_child[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, from_child[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, to_child[1]);
  posix_spawn_file_actions_addclose(&actions, from_child[0]);

  std::vector<char*> env;
  for (char** e = environ; *e != nullptr; ++e) env.push_back(*e);
  env.push_back(entry.data());
  env.push_back(nullptr);
  std::string exe = std::filesystem::read_symlink("/proc/self/exe").string();
  std::string filter = "--gtest_filter=" + test;
  std::vector<char*> argv{exe.data(), filter.data(), nullptr};
  int rc = posix_spawn(&child.pid, exe.c_str(), &actions, nullptr, argv.data(),
                       env.data());
  posix_spawn_file_actions_destroy(&actions);
  close(to_child[0]);
  close(from_child[1]);
  EXPECT_EQ(rc, 0) << "posix_spawn " << exe;
  child.to_child = to_child[1];
  child.from_child = from_child[0];
  return child;
}

// What `fd` gives until `marker` has come (or, with an empty marker, until
// end of file). gtest prints its own lines around the child's.
std::string ReadUntil(int fd, const std::string& marker) {
  std::string out;
  char buf[256];
  ssize_t n;
  while ((marker.empty() || out.find(marker) == std::string::npos) &&
         (n = read(fd, buf, sizeof buf)) > 0) {
    out.append(buf, n);
  }
  return out;
}

TEST(RocksDbStoreOpenTest, OtherProcessHoldsTheLock) {
  TempDir dir;
  Child child = SpawnSelf("RocksDbStoreOpenTest.LockHolderChild",
                          std::string(kLockHolderEnv) + "=" + dir.path());
  ASSERT_GT(child.pid, 0);
  std::string out = ReadUntil(child.from_child, "ready\n");
  ASSERT_NE(out.find("ready\n"), std::string::npos) << out;

  Status s = TryOpen(dir.path());
  EXPECT_EQ(s.code(), Status::Code::kBusy) << s.ToString();
  EXPECT_NE(s.message().find("another process holds the data dir lock"),
            std::string::npos)
      << s.message();

  close(child.to_child);  // child closes its store and exits
  ReadUntil(child.from_child, "");
  close(child.from_child);
  int wstatus = 0;
  ASSERT_EQ(waitpid(child.pid, &wstatus, 0), child.pid);
  EXPECT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);

  EXPECT_TRUE(TryOpen(dir.path()).ok()) << "lock not released by the child";
}

constexpr char kKilledWriterEnv[] = "FENCEGATE_TEST_KILLED_WRITER_DIR";
constexpr int kKilledWriterKeys = 3000;

std::string KilledWriterKey(int i) { return "key-" + std::to_string(i); }
// The token of key i in round 0 or 1.
uint64_t KilledWriterToken(int round, int i) {
  return static_cast<uint64_t>(round) * kKilledWriterKeys + i + 1;
}

// Not a test on its own: the child half of
// AsyncWritesSurviveTheProcessBeingKilled. Takes two rounds of
// kKilledWriterKeys tokens under async durability, with a memtable switch
// every 16 KiB of WAL, says how many switches there were, and is killed
// (SIGKILL) without closing the store.
TEST(RocksDbStoreOpenTest, KilledWriterChild) {
  const char* dir = std::getenv(kKilledWriterEnv);
  if (dir == nullptr) GTEST_SKIP() << "helper for AsyncWritesSurviveTheProcessBeingKilled";
  RocksDbStoreOptions options;
  options.path = dir;
  options.durability = Durability::kAsync;
  options.wal_bytes_per_flush = 16u << 10;
  std::unique_ptr<RocksDbStore> store;
  ASSERT_TRUE(RocksDbStore::Open(options, &store).ok());
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < kKilledWriterKeys; ++i) {
      const uint64_t token = KilledWriterToken(round, i);
      ASSERT_TRUE(AdvanceSync(*store, KilledWriterKey(i), token).fence.accepted) << i;
    }
    // The switch is the writer thread's to make once a write passed the
    // threshold; on a loaded machine it may not have run yet. Wait for it
    // (bounded), so that each round ends in a memtable of its own.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (store->stats().flushes <= static_cast<uint64_t>(round) &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  std::printf("flushes=%llu\n", static_cast<unsigned long long>(store->stats().flushes));
  std::fflush(stdout);
  raise(SIGKILL);
}

// Async durability writes each batch to RocksDB's WAL without an fsync:
// the record is in the page cache (write(2)) before the write is
// acknowledged, so a process killed right after its writes leaves every
// one of them for the next start, memtable switches or not.
TEST(RocksDbStoreOpenTest, AsyncWritesSurviveTheProcessBeingKilled) {
  TempDir dir;
  Child child = SpawnSelf("RocksDbStoreOpenTest.KilledWriterChild",
                          std::string(kKilledWriterEnv) + "=" + dir.path());
  ASSERT_GT(child.pid, 0);
  close(child.to_child);
  std::string out = ReadUntil(child.from_child, "");
  close(child.from_child);
  int wstatus = 0;
  ASSERT_EQ(waitpid(child.pid, &wstatus, 0), child.pid);
  ASSERT_TRUE(WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGKILL) << out;
  const size_t flushes_at = out.find("flushes=");
  ASSERT_NE(flushes_at, std::string::npos) << out;
  // Switches happened (the flushes run in the background and may not
  // have finished when the kill came): the WAL of several memtables.
  EXPECT_GE(std::stoull(out.substr(flushes_at + 8)), 2u) << out;

  auto store = OpenRocks(dir.path(), Durability::kAsync);
  ASSERT_NE(store, nullptr);
  for (int i = 0; i < kKilledWriterKeys; ++i) {
    ASSERT_EQ(GetSync(*store, KilledWriterKey(i)).value,
              std::optional<uint64_t>(KilledWriterToken(1, i)))
        << i;
  }
  // And the store goes on from there.
  EXPECT_FALSE(AdvanceSync(*store, KilledWriterKey(0), KilledWriterToken(1, 0) - 1).fence.accepted);
  EXPECT_TRUE(AdvanceSync(*store, KilledWriterKey(0), KilledWriterToken(1, 0) + 1).fence.accepted);
  ASSERT_TRUE(store->Close().ok());
}

TEST(RocksDbStoreOpenTest, SecondStoreInThisProcessIsBusy) {
  TempDir dir;
  auto first = OpenRocks(dir.path());
  ASSERT_NE(first, nullptr);
  Status s = TryOpen(dir.path());
  EXPECT_EQ(s.code(), Status::Code::kBusy) << s.ToString();
  ASSERT_TRUE(first->Close().ok());
  EXPECT_TRUE(TryOpen(dir.path()).ok());
}

TEST(RocksDbStoreOpenTest, WrongSizedValueIsCorruptionNeverZero) {
  TempDir dir;
  {
    rocksdb::Options options;
    options.create_if_missing = true;
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(options, dir.path(), &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), "bad", "abc").ok());
    ASSERT_TRUE(db->Close().ok());
  }
  {
    auto store = OpenRocks(dir.path());
    ASSERT_NE(store, nullptr);
    auto g = GetSync(*store, "bad");
    EXPECT_EQ(g.status.code(), Status::Code::kCorruption) << g.status.ToString();
    EXPECT_EQ(g.value, std::nullopt);
    auto a = AdvanceSync(*store, "bad", 5);
    EXPECT_EQ(a.status.code(), Status::Code::kCorruption) << a.status.ToString();
    auto r = RaiseSync(*store, "bad", 5);
    EXPECT_EQ(r.status.code(), Status::Code::kCorruption);
    // Other keys, even in the same batch, are unaffected.
    EXPECT_TRUE(AdvanceSync(*store, "good", 1).fence.accepted);
    ASSERT_TRUE(store->Close().ok());
  }
  // The damaged value was not overwritten.
  rocksdb::DB* raw = nullptr;
  ASSERT_TRUE(
      rocksdb::DB::OpenForReadOnly(rocksdb::Options(), dir.path(), &raw).ok());
  std::unique_ptr<rocksdb::DB> db(raw);
  std::string value;
  ASSERT_TRUE(db->Get(rocksdb::ReadOptions(), "bad", &value).ok());
  EXPECT_EQ(value, "abc");
}

TEST(RocksDbStoreOpenTest, RefusesRocksDbFilesWithoutCurrent) {
  TempDir dir;
  { std::ofstream(dir.Sub("MANIFEST-000005")) << "not a manifest"; }
  { std::ofstream(dir.Sub("000004.log")) << "not a wal"; }
  Status s = TryOpen(dir.path());
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  EXPECT_FALSE(std::filesystem::exists(dir.Sub("CURRENT")))
      << "an empty store was created over the damaged one";
}

TEST(RocksDbStoreOpenTest, DamagedCurrentFileFailsOpen) {
  TempDir dir;
  {
    auto store = OpenRocks(dir.path());
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(AdvanceSync(*store, "k", 77).status.ok());
  }
  std::string current;
  {
    std::ifstream in(dir.Sub("CURRENT"));
    std::getline(in, current);
  }
  { std::ofstream(dir.Sub("CURRENT"), std::ios::trunc) << "MANIFEST-999999"; }
  Status s = TryOpen(dir.path());
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.code(), Status::Code::kBusy) << s.ToString();

  // Nothing was overwritten: repairing CURRENT brings the token back.
  { std::ofstream(dir.Sub("CURRENT"), std::ios::trunc) << current << "\n"; }
  auto store = OpenRocks(dir.path());
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(GetSync(*store, "k").value, 77u);
}

// The write-ahead log after a clean Close of a store that took `keys`
// tokens: k000.. with token i + 1, one write each, all in the WAL (8 MiB
// memtable, never flushed). Returns the WAL's path.
std::string StoreWithTokensInTheWal(const TempDir& dir, int keys) {
  {
    auto store = OpenRocks(dir.path());
    EXPECT_NE(store, nullptr);
    if (store == nullptr) return "";
    for (int i = 0; i < keys; ++i) {
      char key[8];
      std::snprintf(key, sizeof key, "k%03d", i);
      EXPECT_TRUE(AdvanceSync(*store, key, i + 1).status.ok());
    }
    EXPECT_TRUE(store->Close().ok());
  }
  std::string wal;
  uintmax_t biggest = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    if (entry.path().extension() == ".log" && entry.file_size() > biggest) {
      biggest = entry.file_size();
      wal = entry.path().string();
    }
  }
  EXPECT_FALSE(wal.empty()) << "no WAL with data in " << dir.path();
  return wal;
}

// A damaged record in the middle of the WAL, with acknowledged records
// after it, must not open as a store that lost them: a token forgotten is
// a stale write let through.
TEST(RocksDbStoreOpenTest, DamageInTheMiddleOfTheWalFailsOpen) {
  TempDir dir;
  std::string wal = StoreWithTokensInTheWal(dir, 100);
  ASSERT_FALSE(wal.empty());
  auto size = std::filesystem::file_size(wal);
  {
    std::fstream f(wal, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(size / 3));
    char c = 0;
    f.read(&c, 1);
    f.seekp(static_cast<std::streamoff>(size / 3));
    c = static_cast<char>(c ^ 0x5a);
    f.write(&c, 1);
  }
  Status s = TryOpen(dir.path());
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  if (s.ok()) {
    auto store = OpenRocks(dir.path());
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(GetSync(*store, "k099").value, 100u) << "the last acknowledged token was lost";
  }
}

// A crash in the middle of a WAL append leaves its record cut short at the
// end of the file: that write was never acknowledged (under sync its fsync
// had not returned), and the store opens with everything before it.
TEST(RocksDbStoreOpenTest, RecordCutShortAtTheEndOfTheWalIsDropped) {
  TempDir dir;
  std::string wal = StoreWithTokensInTheWal(dir, 100);
  ASSERT_FALSE(wal.empty());
  std::filesystem::resize_file(wal, std::filesystem::file_size(wal) - 3);
  auto store = OpenRocks(dir.path());
  ASSERT_NE(store, nullptr);
  for (int i = 0; i < 99; ++i) {
    char key[8];
    std::snprintf(key, sizeof key, "k%03d", i);
    EXPECT_EQ(GetSync(*store, key).value, static_cast<uint64_t>(i + 1)) << key;
  }
  EXPECT_EQ(GetSync(*store, "k099").value, std::nullopt);
}

TEST(RocksDbStoreOpenTest, PathThatIsAFileIsIoError) {
  TempDir dir;
  { std::ofstream(dir.Sub("file")) << "x"; }
  Status s = TryOpen(dir.Sub("file"));
  EXPECT_EQ(s.code(), Status::Code::kIoError) << s.ToString();
}

TEST(RocksDbStoreOpenTest, CreatesMissingParentsAndToleratesForeignFiles) {
  TempDir dir;
  std::filesystem::create_directories(dir.Sub("vol/lost+found"));
  { std::ofstream(dir.Sub("vol/README")) << "volume"; }
  EXPECT_TRUE(TryOpen(dir.Sub("vol")).ok());
  EXPECT_TRUE(TryOpen(dir.Sub("a/b/c")).ok());
}

}  // namespace
}  // namespace fencegate::storage
