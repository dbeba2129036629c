// The journal an earlier fencegate kept under async durability
// (storage/journal.h): its records, what a crash can leave of them, and
// their replay when the store opens.

#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/crc.hpp>
#include <gtest/gtest.h>
#include <rocksdb/file_system.h>
#include <rocksdb/write_batch.h>

#include "storage/journal.h"
#include "storage/rocksdb_store.h"
#include "storage/rocksdb_support.h"
#include "tests/storage/test_util.h"

namespace fencegate::storage::rocksdb_support {
namespace {

using testing::AdvanceSync;
using testing::GetSync;
using testing::OpenRocks;
using testing::TempDir;

// A record's payload as the store writes it: one WriteBatch of Puts.
std::string Batch(const std::vector<std::pair<std::string, uint64_t>>& puts) {
  rocksdb::WriteBatch b;
  for (const auto& [key, token] : puts) EXPECT_TRUE(b.Put(key, EncodeToken(token)).ok());
  return b.Data();
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// One record as that fencegate wrote it: length and CRC-32C (of the
// length's bytes and the payload), little-endian, then the payload.
std::string Record(const std::string& payload) {
  std::string r(kJournalHeaderBytes, '\0');
  const auto length = static_cast<uint32_t>(payload.size());
  for (int i = 0; i < 4; ++i) r[i] = static_cast<char>((length >> (8 * i)) & 0xff);
  boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> crc;
  crc.process_bytes(r.data(), 4);
  crc.process_bytes(payload.data(), payload.size());
  const uint32_t sum = crc.checksum();
  for (int i = 0; i < 4; ++i) r[4 + i] = static_cast<char>((sum >> (8 * i)) & 0xff);
  return r + payload;
}

// Writes `payloads` as the records of segment `index` of dir and returns
// its bytes.
std::string WriteSegment(const std::string& dir, uint64_t index,
                         const std::vector<std::string>& payloads) {
  std::string bytes;
  for (const std::string& p : payloads) bytes += Record(p);
  WriteAll(dir + "/" + JournalFileName(index), bytes);
  EXPECT_EQ(ReadAll(dir + "/" + JournalFileName(index)), bytes);
  return bytes;
}

std::vector<std::string> Parse(const std::string& bytes, Status* status) {
  std::vector<std::string> seen;
  uint64_t records = 0;
  *status = ParseJournalSegment(
      bytes, "test",
      [&](std::string_view p) {
        seen.emplace_back(p);
        return Status::Ok();
      },
      &records);
  EXPECT_EQ(records, seen.size());
  return seen;
}

TEST(JournalTest, FileNamesRoundTripAndOthersAreNotSegments) {
  EXPECT_EQ(JournalFileName(42), "000042.journal");
  uint64_t index = 0;
  ASSERT_TRUE(ParseJournalFileName("000042.journal", &index));
  EXPECT_EQ(index, 42u);
  ASSERT_TRUE(ParseJournalFileName(JournalFileName(12345678901234ull), &index));
  EXPECT_EQ(index, 12345678901234ull);
  for (const char* other : {"000042.log", "42.journal", "00004x.journal", "CURRENT",
                            "000042.journal.tmp", "99999999999999999999999.journal"}) {
    EXPECT_FALSE(ParseJournalFileName(other, &index)) << other;
  }
}

TEST(JournalTest, RecordsReadBackInOrder) {
  TempDir dir;
  std::vector<std::string> payloads = {Batch({{"a", 1}}), Batch({{"b", 2}, {"c", 3}}),
                                       Batch({{std::string(1000, 'k'), 4}})};
  std::string bytes = WriteSegment(dir.path(), 1, payloads);
  Status s;
  EXPECT_EQ(Parse(bytes, &s), payloads);
  EXPECT_TRUE(s.ok()) << s.ToString();
}

// What a killed process leaves: the last record cut anywhere, then the
// zeros of the mapped region. Every whole record before it is read.
TEST(JournalTest, ARecordCutShortAtTheEndIsDropped) {
  TempDir dir;
  std::vector<std::string> payloads = {Batch({{"a", 1}}), Batch({{"b", 2}})};
  const std::string bytes = WriteSegment(dir.path(), 1, payloads);
  const size_t first = kJournalHeaderBytes + payloads[0].size();
  for (size_t cut = first; cut < bytes.size(); ++cut) {
    for (size_t zeros : {size_t{0}, size_t{4096}}) {
      Status s;
      std::vector<std::string> seen = Parse(bytes.substr(0, cut) + std::string(zeros, '\0'), &s);
      EXPECT_TRUE(s.ok()) << cut << ": " << s.ToString();
      EXPECT_EQ(seen, std::vector<std::string>{payloads[0]}) << cut;
    }
  }
  Status s;
  EXPECT_EQ(Parse(bytes + std::string(8192, '\0'), &s), payloads);
  EXPECT_TRUE(s.ok());
}

// What a kill can leave when the interrupted record is larger than a few
// hundred bytes: glibc's memcpy stores such a copy's first bytes (the
// record's length and checksum) last, so the header is still zero while
// payload bytes follow it, up to the page the kill stopped the copy at.
// Nothing was acknowledged after it: the records before it are read and
// the segment opens.
TEST(JournalTest, AnInterruptedRecordWithItsHeaderUnwrittenIsDropped) {
  TempDir dir;
  const std::vector<std::string> payloads = {Batch({{"a", 1}}),
                                             Batch({{std::string(1000, 'k'), 2}})};
  const std::string whole = Record(payloads[0]);
  const std::string torn = Record(payloads[1]);
  for (size_t written : {size_t{64}, size_t{200}, torn.size()}) {
    // Zero header, then the payload bytes up to `written`, then zeros to
    // the end of a 4 KiB page.
    std::string bytes = whole + std::string(kJournalHeaderBytes, '\0') +
                        torn.substr(kJournalHeaderBytes, written - kJournalHeaderBytes);
    bytes.resize(4096, '\0');
    Status s;
    EXPECT_EQ(Parse(bytes, &s), std::vector<std::string>{payloads[0]}) << written;
    EXPECT_TRUE(s.ok()) << written << ": " << s.ToString();
  }
}

// The same through a start: the store opens with the whole records' tokens.
TEST(JournalTest, AStartReplaysASegmentAKillInterrupted) {
  TempDir dir;
  {
    auto store = OpenRocks(dir.path());
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->Close().ok());
  }
  const std::string key(1000, 'k');
  std::string bytes = Record(Batch({{"a", 7}})) + std::string(kJournalHeaderBytes, '\0') +
                      Record(Batch({{key, 9}})).substr(kJournalHeaderBytes);
  bytes.resize(8192, '\0');
  WriteAll(dir.Sub(JournalFileName(3)), bytes);
  auto store = OpenRocks(dir.path(), Durability::kAsync);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(GetSync(*store, "a").value, std::optional<uint64_t>(7));
  EXPECT_EQ(GetSync(*store, key).value, std::nullopt);  // never acknowledged
  EXPECT_FALSE(std::filesystem::exists(dir.Sub(JournalFileName(3))));
  ASSERT_TRUE(store->Close().ok());
}

// Damage followed by records: those records were acknowledged, so the
// journal is refused instead of being read up to the damage.
TEST(JournalTest, DamageBeforeMoreRecordsIsCorruption) {
  TempDir dir;
  std::vector<std::string> payloads = {Batch({{"a", 1}}), Batch({{"b", 2}}), Batch({{"c", 3}})};
  const std::string bytes = WriteSegment(dir.path(), 1, payloads);
  const size_t second = kJournalHeaderBytes + payloads[0].size();
  // A flipped byte in the second record's payload, and a zeroed header.
  std::string flipped = bytes;
  flipped[second + kJournalHeaderBytes + 3] ^= 0x20;
  std::string zeroed = bytes;
  std::fill_n(zeroed.begin() + static_cast<std::ptrdiff_t>(second), kJournalHeaderBytes, '\0');
  for (const std::string& damaged : {flipped, zeroed}) {
    Status s;
    std::vector<std::string> seen = Parse(damaged, &s);
    EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
    EXPECT_NE(s.message().find("damaged at byte " + std::to_string(second)), std::string::npos)
        << s.ToString();
  }
  // An interrupted record's payload behind a zero header, then a whole
  // record: not what a crash leaves.
  std::string torn = Record(payloads[0]) + std::string(kJournalHeaderBytes, '\0') +
                     Record(Batch({{std::string(600, 'k'), 2}})).substr(kJournalHeaderBytes) +
                     Record(payloads[2]);
  Status s;
  Parse(torn, &s);
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
}

// A journal left by a killed async run is replayed by a start under either
// durability, newest record of a key last, and deleted once flushed.
TEST(JournalTest, AStartReplaysSegmentsInOrderAndDeletesThem) {
  for (Durability durability : {Durability::kSync, Durability::kAsync}) {
    TempDir dir;
    {
      auto store = OpenRocks(dir.path(), durability);  // creates the database
      ASSERT_NE(store, nullptr);
      ASSERT_TRUE(AdvanceSync(*store, "old", 50).fence.accepted);
      ASSERT_TRUE(store->Close().ok());
    }
    WriteSegment(dir.path(), 7, {Batch({{"a", 1}, {"b", 1}}), Batch({{"a", 2}})});
    WriteSegment(dir.path(), 8, {Batch({{"b", 5}}), Batch({{"a", 9}, {"old", 60}})});
    auto store = OpenRocks(dir.path(), durability);
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(GetSync(*store, "a").value, std::optional<uint64_t>(9));
    EXPECT_EQ(GetSync(*store, "b").value, std::optional<uint64_t>(5));
    EXPECT_EQ(GetSync(*store, "old").value, std::optional<uint64_t>(60));
    std::vector<uint64_t> left;
    ASSERT_TRUE(ListJournal(rocksdb::FileSystem::Default().get(), dir.path(), &left).ok());
    EXPECT_TRUE(left.empty());
    EXPECT_FALSE(AdvanceSync(*store, "a", 8).fence.accepted);
    ASSERT_TRUE(store->Close().ok());
  }
}

TEST(JournalTest, AStartRefusesAJournalDamagedInTheMiddle) {
  TempDir dir;
  {
    auto store = OpenRocks(dir.path());
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->Close().ok());
  }
  std::string bytes = WriteSegment(dir.path(), 1, {Batch({{"a", 1}}), Batch({{"a", 2}})});
  bytes[kJournalHeaderBytes + 2] ^= 0x01;  // the first record's payload
  WriteAll(dir.Sub(JournalFileName(1)), bytes);
  RocksDbStoreOptions options;
  options.path = dir.path();
  std::unique_ptr<RocksDbStore> store;
  Status s = RocksDbStore::Open(options, &store);
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find(JournalFileName(1)), std::string::npos) << s.ToString();
  EXPECT_TRUE(std::filesystem::exists(dir.Sub(JournalFileName(1)))) << "kept for the operator";
  // The advice never loses tokens: moving the segment aside comes with
  // raising every key past the newest token issued.
  EXPECT_NE(s.message().find("raise every key"), std::string::npos) << s.ToString();
  EXPECT_EQ(s.message().find("Restore the data dir from a backup"), std::string::npos);
}

// A data dir with a journal but no CURRENT is a damaged store, never a new one.
TEST(JournalTest, AJournalWithoutADatabaseIsRefused) {
  TempDir dir;
  WriteSegment(dir.path(), 1, {Batch({{"a", 1}})});
  RocksDbStoreOptions options;
  options.path = dir.path();
  std::unique_ptr<RocksDbStore> store;
  Status s = RocksDbStore::Open(options, &store);
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
}

}  // namespace
}  // namespace fencegate::storage::rocksdb_support
