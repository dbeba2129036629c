// PowerLossFs itself: a power loss takes exactly what was not durable, so
// that the store tests over it can fail.

#include "tests/storage/power_loss_fs.h"

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>

#include <gtest/gtest.h>
#include <rocksdb/file_system.h>

#include "tests/storage/test_util.h"

namespace fencegate::storage::testing {
namespace {

using rocksdb::FileOptions;
using rocksdb::IOOptions;
using rocksdb::Slice;

std::optional<std::string> Content(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A test data dir whose entries start durable, and a file system over it.
class PowerLossFsTest : public ::testing::Test {
 protected:
  std::unique_ptr<rocksdb::FSWritableFile> Create(const std::string& name) {
    std::unique_ptr<rocksdb::FSWritableFile> f;
    EXPECT_TRUE(fs_->NewWritableFile(dir_.Sub(name), FileOptions(), &f, nullptr).ok());
    return f;
  }
  void Append(rocksdb::FSWritableFile& f, const std::string& data) {
    ASSERT_TRUE(f.Append(Slice(data), IOOptions(), nullptr).ok());
  }
  void SyncDir() {
    std::unique_ptr<rocksdb::FSDirectory> d;
    ASSERT_TRUE(fs_->NewDirectory(dir_.path(), IOOptions(), &d, nullptr).ok());
    ASSERT_TRUE(d->Fsync(IOOptions(), nullptr).ok());
  }
  // Closes nothing: the caller closes its files first.
  LossReport Lose(LossMode mode, uint64_t seed = 1) {
    fs_->Deactivate();
    std::mt19937_64 rng(seed);
    LossReport report;
    rocksdb::IOStatus s = fs_->LosePower(mode, rng, &report);
    EXPECT_TRUE(s.ok()) << s.ToString();
    fs_->Reactivate();
    return report;
  }

  TempDir dir_;
  std::shared_ptr<PowerLossFs> fs_ = std::make_shared<PowerLossFs>();
};

TEST_F(PowerLossFsTest, UnsyncedAppendIsDroppedSyncedAppendKept) {
  auto f = Create("wal");
  SyncDir();
  Append(*f, "durable");
  ASSERT_TRUE(f->Sync(IOOptions(), nullptr).ok());
  Append(*f, "+lost");
  // Neither hands the bytes to the disk for sure.
  ASSERT_TRUE(f->Flush(IOOptions(), nullptr).ok());
  ASSERT_TRUE(f->RangeSync(0, 12, IOOptions(), nullptr).ok());
  ASSERT_TRUE(f->Close(IOOptions(), nullptr).ok());
  EXPECT_EQ(Content(dir_.Sub("wal")), "durable+lost");

  LossReport r = Lose(LossMode::kDropUnsynced);
  EXPECT_EQ(Content(dir_.Sub("wal")), "durable");
  EXPECT_EQ(r.files_cut, 1);
  EXPECT_EQ(r.bytes_lost, 5u);
}

TEST_F(PowerLossFsTest, FsyncMakesAppendsDurableToo) {
  auto f = Create("manifest");
  SyncDir();
  Append(*f, "all of it");
  ASSERT_TRUE(f->Fsync(IOOptions(), nullptr).ok());
  ASSERT_TRUE(f->Close(IOOptions(), nullptr).ok());
  for (LossMode mode :
       {LossMode::kDropUnsynced, LossMode::kKeepRandomPrefix, LossMode::kTearLastPage}) {
    LossReport r = Lose(mode);
    EXPECT_EQ(Content(dir_.Sub("manifest")), "all of it");
    EXPECT_EQ(r.files_cut, 0);
  }
}

TEST_F(PowerLossFsTest, FileCreatedSinceTheLastDirSyncVanishes) {
  auto before = Create("before");
  SyncDir();
  auto after = Create("after");
  for (auto* f : {before.get(), after.get()}) {
    Append(*f, "synced");
    ASSERT_TRUE(f->Sync(IOOptions(), nullptr).ok());  // its data, not its entry
    ASSERT_TRUE(f->Close(IOOptions(), nullptr).ok());
  }
  EXPECT_TRUE(fs_->View(dir_.Sub("before"))->entry_durable);
  EXPECT_FALSE(fs_->View(dir_.Sub("after"))->entry_durable);
  LossReport r = Lose(LossMode::kKeepRandomPrefix);
  EXPECT_EQ(Content(dir_.Sub("before")), "synced");
  EXPECT_EQ(Content(dir_.Sub("after")), std::nullopt);
  EXPECT_EQ(r.files_removed, 1);
}

// RocksDB syncs its directory with FsyncWithDirOptions after a new WAL's
// first sync and after renaming CURRENT.
TEST_F(PowerLossFsTest, FsyncWithDirOptionsSyncsTheDirectory) {
  auto f = Create("000004.log");
  Append(*f, "record");
  ASSERT_TRUE(f->Sync(IOOptions(), nullptr).ok());
  ASSERT_TRUE(f->Close(IOOptions(), nullptr).ok());
  std::unique_ptr<rocksdb::FSDirectory> d;
  ASSERT_TRUE(fs_->NewDirectory(dir_.path() + "/", IOOptions(), &d, nullptr).ok());
  ASSERT_TRUE(
      d->FsyncWithDirOptions(IOOptions(), nullptr,
                             rocksdb::DirFsyncOptions(rocksdb::DirFsyncOptions::kNewFileSynced))
          .ok());
  EXPECT_EQ(fs_->dir_syncs(), 1u);
  EXPECT_TRUE(fs_->View(dir_.Sub("000004.log"))->entry_durable);
  Lose(LossMode::kDropUnsynced);
  EXPECT_EQ(Content(dir_.Sub("000004.log")), "record");
}

// RocksDB replaces CURRENT by renaming a synced temporary file over it:
// until the directory is synced, a loss brings the old CURRENT back.
TEST_F(PowerLossFsTest, RenameIntoPlaceIsUndoneWithoutADirSync) {
  for (bool sync_dir : {false, true}) {
    SCOPED_TRACE(sync_dir ? "dir synced" : "dir not synced");
    { std::ofstream(dir_.Sub("CURRENT"), std::ios::trunc) << "MANIFEST-1\n"; }
    auto f = Create("000009.dbtmp");
    Append(*f, "MANIFEST-9\n");
    ASSERT_TRUE(f->Sync(IOOptions(), nullptr).ok());
    ASSERT_TRUE(f->Close(IOOptions(), nullptr).ok());
    ASSERT_TRUE(
        fs_->RenameFile(dir_.Sub("000009.dbtmp"), dir_.Sub("CURRENT"), IOOptions(), nullptr).ok());
    if (sync_dir) SyncDir();
    LossReport r = Lose(LossMode::kDropUnsynced);
    EXPECT_EQ(Content(dir_.Sub("CURRENT")), sync_dir ? "MANIFEST-9\n" : "MANIFEST-1\n");
    EXPECT_EQ(Content(dir_.Sub("000009.dbtmp")), std::nullopt);
    EXPECT_EQ(r.files_restored, sync_dir ? 0 : 1);
  }
}

// Losses drawn per random mode test.
constexpr uint64_t kSeeds = 24;

// Bytes 0..n-1 of the test pattern: nonzero, so zeros stand out.
std::string Pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>('a' + i % 26);
  return s;
}

TEST_F(PowerLossFsTest, RandomPrefixKeepsTheSyncedBytesAndSomeOfTheRest) {
  const std::string data = Pattern(1100);
  std::set<size_t> kept_sizes;
  for (uint64_t seed = 0; seed < kSeeds; ++seed) {
    const std::string name = "f" + std::to_string(seed);
    auto f = Create(name);
    SyncDir();
    Append(*f, data.substr(0, 100));
    ASSERT_TRUE(f->Sync(IOOptions(), nullptr).ok());
    Append(*f, data.substr(100));
    ASSERT_TRUE(f->Close(IOOptions(), nullptr).ok());
    Lose(LossMode::kKeepRandomPrefix, seed);
    std::optional<std::string> got = Content(dir_.Sub(name));
    ASSERT_TRUE(got.has_value());
    ASSERT_GE(got->size(), 100u) << "synced bytes lost, seed " << seed;
    ASSERT_LE(got->size(), data.size());
    EXPECT_EQ(*got, data.substr(0, got->size())) << "not a prefix, seed " << seed;
    kept_sizes.insert(got->size());
  }
  // Some losses keep part of the unsynced bytes, not just all or none.
  EXPECT_GT(kept_sizes.size(), kSeeds / 3);
}

TEST_F(PowerLossFsTest, TornPageKeepsAPrefixAndZerosTheRestOfItsPage) {
  constexpr size_t kSynced = 5000, kWritten = 13000, kPage = 4096;
  const std::string data = Pattern(kWritten);
  int torn = 0;
  for (uint64_t seed = 0; seed < kSeeds; ++seed) {
    const std::string name = "f" + std::to_string(seed);
    auto f = Create(name);
    SyncDir();
    Append(*f, data.substr(0, kSynced));
    ASSERT_TRUE(f->Sync(IOOptions(), nullptr).ok());
    Append(*f, data.substr(kSynced));
    ASSERT_TRUE(f->Close(IOOptions(), nullptr).ok());
    LossReport r = Lose(LossMode::kTearLastPage, seed);
    std::optional<std::string> got = Content(dir_.Sub(name));
    ASSERT_TRUE(got.has_value());
    // The cut: the first zero byte; everything before it as written.
    const size_t cut = got->find('\0');
    ASSERT_NE(cut, std::string::npos) << "no torn bytes, seed " << seed;
    ASSERT_GE(cut, kSynced) << "synced bytes torn, seed " << seed;
    EXPECT_EQ(got->substr(0, cut), data.substr(0, cut));
    // Zeros from the cut to the end of its page, or of the bytes written.
    EXPECT_EQ(got->size(), std::min(kWritten, (cut / kPage + 1) * kPage)) << "seed " << seed;
    EXPECT_EQ(got->find_first_not_of('\0', cut), std::string::npos) << "seed " << seed;
    EXPECT_EQ(r.bytes_zeroed, got->size() - cut);
    torn += r.files_cut;
  }
  EXPECT_EQ(torn, static_cast<int>(kSeeds));
}

TEST_F(PowerLossFsTest, WithoutPowerEveryWriteFailsAndAfterItWritesGoOn) {
  auto f = Create("wal");
  SyncDir();
  Append(*f, "kept");
  ASSERT_TRUE(f->Sync(IOOptions(), nullptr).ok());
  std::unique_ptr<rocksdb::FSDirectory> d;
  ASSERT_TRUE(fs_->NewDirectory(dir_.path(), IOOptions(), &d, nullptr).ok());
  std::mt19937_64 rng(1);
  ASSERT_FALSE(fs_->LosePower(LossMode::kDropUnsynced, rng, nullptr).ok()) << "still powered";

  fs_->Deactivate();
  EXPECT_TRUE(f->Append(Slice("x"), IOOptions(), nullptr).IsIOError());
  EXPECT_TRUE(f->Sync(IOOptions(), nullptr).IsIOError());
  EXPECT_TRUE(f->Fsync(IOOptions(), nullptr).IsIOError());
  EXPECT_TRUE(d->Fsync(IOOptions(), nullptr).IsIOError());
  std::unique_ptr<rocksdb::FSWritableFile> g;
  EXPECT_TRUE(fs_->NewWritableFile(dir_.Sub("new"), FileOptions(), &g, nullptr).IsIOError());
  EXPECT_TRUE(fs_->RenameFile(dir_.Sub("wal"), dir_.Sub("x"), IOOptions(), nullptr).IsIOError());
  EXPECT_TRUE(fs_->DeleteFile(dir_.Sub("wal"), IOOptions(), nullptr).IsIOError());
  EXPECT_EQ(fs_->View(dir_.Sub("wal"))->appended, 4u);
  // A file still open: the loss would race with its writer.
  EXPECT_FALSE(fs_->LosePower(LossMode::kDropUnsynced, rng, nullptr).ok());
  ASSERT_TRUE(f->Close(IOOptions(), nullptr).ok());
  ASSERT_TRUE(fs_->LosePower(LossMode::kDropUnsynced, rng, nullptr).ok());
  fs_->Reactivate();

  // After the loss, what the disk holds counts as durable.
  EXPECT_FALSE(fs_->View(dir_.Sub("wal")).has_value());
  std::unique_ptr<rocksdb::FSWritableFile> h;
  ASSERT_TRUE(fs_->ReopenWritableFile(dir_.Sub("wal"), FileOptions(), &h, nullptr).ok());
  Append(*h, "+more");
  ASSERT_TRUE(h->Close(IOOptions(), nullptr).ok());
  Lose(LossMode::kDropUnsynced);
  EXPECT_EQ(Content(dir_.Sub("wal")), "kept");
}

// The loss can fall between a WAL append and its sync: the append stays
// unsynced, and the sync fails without making it durable.
TEST_F(PowerLossFsTest, DeactivateAfterFailsTheOperationItFallsOn) {
  auto f = Create("wal");
  SyncDir();
  EXPECT_FALSE(fs_->WaitDeactivated(std::chrono::milliseconds(0)));
  fs_->DeactivateAfter(2);
  Append(*f, "a");
  Append(*f, "b");
  EXPECT_TRUE(f->Sync(IOOptions(), nullptr).IsIOError());
  EXPECT_TRUE(fs_->WaitDeactivated(std::chrono::milliseconds(0)));
  EXPECT_EQ(fs_->View(dir_.Sub("wal"))->synced, 0u);
  ASSERT_TRUE(f->Close(IOOptions(), nullptr).ok());
  std::mt19937_64 rng(1);
  ASSERT_TRUE(fs_->LosePower(LossMode::kDropUnsynced, rng, nullptr).ok());
  fs_->Reactivate();
  EXPECT_EQ(Content(dir_.Sub("wal")), "");
}

}  // namespace
}  // namespace fencegate::storage::testing
