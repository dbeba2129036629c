// RepairTornTail on log files RocksDB wrote (WAL and MANIFEST) and then
// torn, damaged or left alone by the test; and on hand-built files for the
// record types RocksDB does not write here.

#include "storage/log_tail.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <boost/crc.hpp>
#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <rocksdb/file_system.h>
#include <rocksdb/options.h>

#include "storage/rocksdb_store.h"
#include "tests/storage/test_util.h"

namespace fencegate::storage {
namespace {

using rocksdb_support::RepairTornTail;
using rocksdb_support::RepairTornTails;
using rocksdb_support::TornTail;
using testing::AdvanceSync;
using testing::GetSync;
using testing::OpenRocks;
using testing::TempDir;

constexpr uint64_t kBlock = 32768;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// The last `n` bytes of the file read as zeros, its size unchanged.
void ZeroTail(const std::string& path, uint64_t n) {
  std::string bytes = ReadAll(path);
  ASSERT_LE(n, bytes.size());
  std::fill(bytes.end() - static_cast<std::ptrdiff_t>(n), bytes.end(), '\0');
  WriteAll(path, bytes);
}

void FlipByte(const std::string& path, uint64_t at) {
  std::string bytes = ReadAll(path);
  ASSERT_LT(at, bytes.size());
  bytes[at] = static_cast<char>(bytes[at] ^ 0x5a);
  WriteAll(path, bytes);
}

rocksdb::Options DbOptions() {
  rocksdb::Options o;
  o.create_if_missing = true;
  o.paranoid_checks = true;
  o.wal_recovery_mode = rocksdb::WALRecoveryMode::kTolerateCorruptedTailRecords;
  return o;
}

std::string Key(int i) {
  char key[8];
  std::snprintf(key, sizeof key, "k%03d", i);
  return key;
}

// The largest WAL file in dir.
std::string WalOf(const std::string& dir) {
  std::string wal;
  uintmax_t biggest = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() == ".log" && entry.file_size() >= biggest) {
      biggest = entry.file_size();
      wal = entry.path().string();
    }
  }
  return wal;
}

// A database RocksDB wrote: one synced Put per value (key Key(i), value
// values[i]), all in the WAL (never flushed). Returns the WAL's path and
// sets *last_start to where the last Put's record begins.
std::string WalWith(const TempDir& dir, const std::vector<std::string>& values,
                    uint64_t* last_start) {
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(DbOptions(), dir.path(), &raw);
  EXPECT_TRUE(s.ok()) << s.ToString();
  if (!s.ok()) return "";
  std::unique_ptr<rocksdb::DB> db(raw);
  rocksdb::WriteOptions sync;
  sync.sync = true;
  for (size_t i = 0; i < values.size(); ++i) {
    if (i + 1 == values.size()) *last_start = std::filesystem::file_size(WalOf(dir.path()));
    EXPECT_TRUE(db->Put(sync, Key(static_cast<int>(i)), values[i]).ok());
  }
  EXPECT_TRUE(db->Close().ok());
  return WalOf(dir.path());
}

// n values of `bytes` bytes each, none ending in a zero byte.
std::vector<std::string> Values(int n, size_t bytes = 20) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) out.push_back(std::string(bytes, static_cast<char>('a' + i % 26)));
  return out;
}

rocksdb::Status TryOpenDb(const TempDir& dir, std::unique_ptr<rocksdb::DB>* db) {
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(DbOptions(), dir.path(), &raw);
  db->reset(raw);
  return s;
}

// Opens the database and checks that it holds values[0..keep) and no more.
void ExpectHolds(const TempDir& dir, const std::vector<std::string>& values, size_t keep) {
  std::unique_ptr<rocksdb::DB> db;
  rocksdb::Status s = TryOpenDb(dir, &db);
  ASSERT_TRUE(s.ok()) << s.ToString();
  for (size_t i = 0; i < values.size(); ++i) {
    std::string got;
    rocksdb::Status g = db->Get(rocksdb::ReadOptions(), Key(static_cast<int>(i)), &got);
    if (i < keep) {
      EXPECT_TRUE(g.ok()) << Key(static_cast<int>(i)) << ": " << g.ToString();
      EXPECT_EQ(got, values[i]) << Key(static_cast<int>(i));
    } else {
      EXPECT_TRUE(g.IsNotFound()) << Key(static_cast<int>(i)) << " was torn, yet read back";
    }
  }
}

struct Repair {
  Status status;
  bool repaired = false;
  TornTail tail;
};

Repair RepairFile(const std::string& path) {
  Repair r;
  r.status = RepairTornTail(rocksdb::FileSystem::Default().get(), path, &r.repaired, &r.tail);
  return r;
}

// One physical record in RocksDB's log format, for the types RocksDB does
// not write with fencegate's options; the caller keeps it inside a block.
std::string PhysicalRecord(unsigned char type, const std::string& payload, size_t header = 7) {
  boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> crc;
  std::string covered(1, static_cast<char>(type));
  covered += std::string(header - 7, '\x01');  // a recyclable header's log number
  covered += payload;
  crc.process_bytes(covered.data(), covered.size());
  const uint32_t c = crc.checksum();
  const uint32_t masked = ((c >> 15) | (c << 17)) + 0xa282ead8u;
  std::string out;
  for (int i = 0; i < 4; ++i) out += static_cast<char>((masked >> (8 * i)) & 0xff);
  out += static_cast<char>(payload.size() & 0xff);
  out += static_cast<char>(payload.size() >> 8);
  out += covered;
  return out;
}

TEST(LogTailTest, IntactWalIsLeftAlone) {
  TempDir dir;
  uint64_t last = 0;
  std::string wal = WalWith(dir, Values(50), &last);
  const std::string before = ReadAll(wal);
  Repair r = RepairFile(wal);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_FALSE(r.repaired);
  EXPECT_EQ(ReadAll(wal), before);
}

// The defect this repairs: RocksDB refuses a WAL whose last record a torn
// page zeroed; cut off, the WAL opens with every record before it.
TEST(LogTailTest, TornLastRecordIsCutOff) {
  TempDir dir;
  const std::vector<std::string> values = Values(50);
  uint64_t last = 0;
  std::string wal = WalWith(dir, values, &last);
  const uint64_t size = std::filesystem::file_size(wal);
  ZeroTail(wal, 5);
  {
    std::unique_ptr<rocksdb::DB> db;
    rocksdb::Status s = TryOpenDb(dir, &db);
    ASSERT_TRUE(s.IsCorruption()) << "RocksDB now forgives a torn tail: " << s.ToString();
  }
  Repair r = RepairFile(wal);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  ASSERT_TRUE(r.repaired);
  EXPECT_EQ(r.tail.file, wal);
  EXPECT_EQ(r.tail.offset, last);
  EXPECT_EQ(r.tail.bytes_dropped, size - last);
  EXPECT_EQ(std::filesystem::file_size(wal), last);
  ExpectHolds(dir, values, values.size() - 1);
}

// A torn page that zeroed the last record's header too.
TEST(LogTailTest, TornHeaderIsCutOff) {
  TempDir dir;
  const std::vector<std::string> values = Values(50);
  uint64_t last = 0;
  std::string wal = WalWith(dir, values, &last);
  const uint64_t size = std::filesystem::file_size(wal);
  ZeroTail(wal, size - last - 5);  // the type byte and length's high byte on
  Repair r = RepairFile(wal);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  ASSERT_TRUE(r.repaired);
  EXPECT_EQ(r.tail.offset, last);
  ExpectHolds(dir, values, values.size() - 1);
}

// A record that spans a block boundary (a FIRST fragment, then a LAST)
// is cut from its first fragment on, whether the LAST fragment's data or
// its whole header was torn.
TEST(LogTailTest, TornRecordAcrossABlockBoundaryIsCutAtItsFirstFragment) {
  for (bool whole_header : {false, true}) {
    SCOPED_TRACE(whole_header ? "last fragment's header zero" : "last fragment's end zero");
    TempDir dir;
    std::vector<std::string> values = Values(30, 1000);  // ~30 KiB: the next one crosses
    values.push_back(std::string(6000, 'z'));
    uint64_t last = 0;
    std::string wal = WalWith(dir, values, &last);
    const uint64_t size = std::filesystem::file_size(wal);
    ASSERT_LT(last, kBlock);
    ASSERT_GT(size, kBlock + 7);
    ZeroTail(wal, whole_header ? size - kBlock : 100);
    Repair r = RepairFile(wal);
    ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    ASSERT_TRUE(r.repaired);
    EXPECT_EQ(r.tail.offset, last);
    ExpectHolds(dir, values, values.size() - 1);
  }
}

// Damage with records after it: those were acknowledged, so the file is
// left for RocksDB to refuse, whether the damage is a flipped byte or a
// run of zeros.
TEST(LogTailTest, DamageWithDataAfterItIsLeftAlone) {
  for (bool zeros : {false, true}) {
    SCOPED_TRACE(zeros ? "zeroed run" : "flipped byte");
    TempDir dir;
    uint64_t last = 0;
    std::string wal = WalWith(dir, Values(100), &last);
    std::string bytes = ReadAll(wal);
    const size_t at = bytes.size() / 3;
    if (zeros) {
      std::fill(bytes.begin() + at, bytes.begin() + at + 40, '\0');
    } else {
      bytes[at] = static_cast<char>(bytes[at] ^ 0x5a);
    }
    WriteAll(wal, bytes);
    Repair r = RepairFile(wal);
    ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    EXPECT_FALSE(r.repaired);
    EXPECT_EQ(ReadAll(wal), bytes);
    std::unique_ptr<rocksdb::DB> db;
    EXPECT_TRUE(TryOpenDb(dir, &db).IsCorruption());
  }
}

// A damaged last record whose bytes are all there (its last byte is not
// zero) is bit rot, not a tear: its sync may have returned.
TEST(LogTailTest, BitRotInTheLastRecordIsLeftAlone) {
  TempDir dir;
  uint64_t last = 0;
  std::string wal = WalWith(dir, Values(50), &last);
  const uint64_t size = std::filesystem::file_size(wal);
  FlipByte(wal, last + (size - last) / 2);
  const std::string bytes = ReadAll(wal);
  ASSERT_NE(bytes.back(), '\0');
  Repair r = RepairFile(wal);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_FALSE(r.repaired);
  EXPECT_EQ(ReadAll(wal), bytes);
  std::unique_ptr<rocksdb::DB> db;
  EXPECT_TRUE(TryOpenDb(dir, &db).IsCorruption());
}

TEST(LogTailTest, FileOfZerosAndEmptyFileAreLeftAlone) {
  TempDir dir;
  for (uint64_t size : {uint64_t{0}, uint64_t{3}, uint64_t{100}, kBlock, 3 * kBlock + 5}) {
    SCOPED_TRACE(size);
    const std::string path = dir.Sub("000007.log");
    WriteAll(path, std::string(size, '\0'));
    Repair r = RepairFile(path);
    ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    EXPECT_FALSE(r.repaired);
    EXPECT_EQ(std::filesystem::file_size(path), size);
  }
}

// Recyclable records (types 5 to 8) carry the log number in a longer
// header; RocksDB writes them only with recycle_log_file_num > 0. A file
// holding one is not this repair's to judge.
TEST(LogTailTest, RecyclableRecordsAreLeftAlone) {
  TempDir dir;
  const std::string path = dir.Sub("000007.log");
  std::string bytes = PhysicalRecord(5, std::string(40, 'r'), 11);
  bytes += PhysicalRecord(5, std::string(40, 's'), 11);
  std::fill(bytes.end() - 10, bytes.end(), '\0');
  WriteAll(path, bytes);
  Repair r = RepairFile(path);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_FALSE(r.repaired);
  EXPECT_EQ(ReadAll(path), bytes);
}

// The hand-built writer agrees with the reader: a torn second FULL record
// is cut at its start.
TEST(LogTailTest, HandBuiltTornRecordIsCutOff) {
  TempDir dir;
  const std::string path = dir.Sub("000007.log");
  std::string bytes = PhysicalRecord(1, std::string(40, 'r'));
  const uint64_t second = bytes.size();
  bytes += PhysicalRecord(1, std::string(40, 's'));
  WriteAll(path, bytes);
  EXPECT_FALSE(RepairFile(path).repaired);
  std::fill(bytes.end() - 10, bytes.end(), '\0');
  WriteAll(path, bytes);
  Repair r = RepairFile(path);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  ASSERT_TRUE(r.repaired);
  EXPECT_EQ(r.tail.offset, second);
  EXPECT_EQ(std::filesystem::file_size(path), second);
}

// The MANIFEST that CURRENT names is repaired too: RocksDB reads it as
// strictly as a WAL, and refuses a torn last edit.
TEST(LogTailTest, TornManifestIsCutOff) {
  TempDir dir;
  {
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(DbOptions(), dir.path(), &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), "k", "v").ok());
    ASSERT_TRUE(db->Flush(rocksdb::FlushOptions()).ok());
    ASSERT_TRUE(db->Close().ok());
  }
  std::string current = ReadAll(dir.Sub("CURRENT"));
  current.pop_back();
  const std::string manifest = dir.Sub(current);
  const uint64_t size = std::filesystem::file_size(manifest);
  ZeroTail(manifest, 3);
  {
    std::unique_ptr<rocksdb::DB> db;
    rocksdb::Status s = TryOpenDb(dir, &db);
    ASSERT_TRUE(s.IsCorruption()) << "RocksDB now forgives a torn MANIFEST: " << s.ToString();
  }
  std::vector<TornTail> repairs;
  Status s = RepairTornTails(rocksdb::FileSystem::Default().get(), dir.path(), &repairs);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(repairs.size(), 1u);
  EXPECT_EQ(repairs[0].file, manifest);
  EXPECT_LT(repairs[0].offset, size);
  EXPECT_EQ(repairs[0].offset + repairs[0].bytes_dropped, size);
  std::unique_ptr<rocksdb::DB> db;
  rocksdb::Status opened = TryOpenDb(dir, &db);
  EXPECT_TRUE(opened.ok()) << opened.ToString();
}

// The store repairs before RocksDB reads: a WAL torn in its last record
// opens with every token before it.
TEST(LogTailTest, StoreOpensOverATornWal) {
  TempDir dir;
  {
    auto store = OpenRocks(dir.path());
    ASSERT_NE(store, nullptr);
    for (int i = 0; i < 100; ++i) EXPECT_TRUE(AdvanceSync(*store, Key(i), i + 1).status.ok());
    ASSERT_TRUE(store->Close().ok());
  }
  ZeroTail(WalOf(dir.path()), 3);
  auto store = OpenRocks(dir.path());
  ASSERT_NE(store, nullptr);
  for (int i = 0; i < 99; ++i) {
    EXPECT_EQ(GetSync(*store, Key(i)).value, static_cast<uint64_t>(i + 1)) << Key(i);
  }
  EXPECT_EQ(GetSync(*store, Key(99)).value, std::nullopt);
}

}  // namespace
}  // namespace fencegate::storage
