// Export/import of fences (storage/export_import.h) over a real RocksDbStore.

#include "storage/export_import.h"

#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <rocksdb/db.h>

#include "storage/fault_injecting_store.h"
#include "storage/rocksdb_store.h"
#include "tests/storage/test_util.h"

namespace fencegate::storage {
namespace {

using testing::AdvanceSync;
using testing::GetSync;
using testing::OpenRocks;
using testing::RaiseSync;
using testing::TempDir;

TEST(ExportImportTest, FormatIsOneJsonObjectPerKey) {
  EXPECT_EQ(FormatRecord({"/objects/a", 34}), R"({"key":"/objects/a","token":34})");
  EXPECT_EQ(FormatRecord({"k", 18446744073709551615ull}),
            R"({"key":"k","token":18446744073709551615})");
  // Not UTF-8: hex, never mangled.
  EXPECT_EQ(FormatRecord({std::string("a\xff", 2), 1}), R"({"key_hex":"61ff","token":1})");
}

TEST(ExportImportTest, ParseAcceptsBothKeyFormsAndBlankLines) {
  TokenRecord r;
  bool blank = false;
  ASSERT_TRUE(ParseRecord(R"({"key":"/x","token":7})", &r, &blank).ok());
  EXPECT_FALSE(blank);
  EXPECT_EQ(r.key, "/x");
  EXPECT_EQ(r.token, 7u);
  ASSERT_TRUE(ParseRecord(R"({"token":1,"key_hex":"61FF"})", &r, &blank).ok());
  EXPECT_EQ(r.key, std::string("a\xff", 2));
  ASSERT_TRUE(ParseRecord(" \t\r", &r, &blank).ok());
  EXPECT_TRUE(blank);
}

TEST(ExportImportTest, ParseRefusesBadRecords) {
  const char* bad[] = {
      "{",                                        // not JSON
      "[1,2]",                                    // not an object
      R"({"key":"/x"})",                          // no token
      R"({"token":1})",                           // no key
      R"({"key":"/x","key_hex":"2f","token":1})",  // both key forms
      R"({"key":"","token":1})",                  // empty key
      R"({"key":5,"token":1})",                   // key not a string
      R"({"key_hex":"2","token":1})",             // odd hex
      R"({"key_hex":"zz","token":1})",            // not hex
      R"({"key":"/x","token":-1})",               // negative
      R"({"key":"/x","token":1.5})",              // not an integer
      R"({"key":"/x","token":"7"})",              // a string
      R"({"key":"/x","token":18446744073709551616})",  // overflow
      R"({"key":"/x","token":1,"extra":true})",   // unknown field
  };
  for (const char* line : bad) {
    TokenRecord r;
    bool blank = false;
    Status s = ParseRecord(line, &r, &blank);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << line;
  }
  TokenRecord r;
  bool blank = false;
  EXPECT_FALSE(ParseRecord(R"({"key":")" + std::string(1025, 'k') + R"(","token":1})", &r,
                           &blank)
                   .ok());
}

TEST(ExportImportTest, ReadRecordsNamesTheBadLineAndReturnsNothing) {
  std::istringstream in("{\"key\":\"/a\",\"token\":1}\n\n{\"key\":\"/b\",\"token\":x}\n");
  std::vector<TokenRecord> records{{"stale", 1}};
  Status s = ReadRecords(in, &records);
  ASSERT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("line 3"), std::string::npos) << s.message();
  EXPECT_TRUE(records.empty());
}

TEST(ExportImportTest, ExportThenImportRoundTripsAndOnlyRaises) {
  TempDir dir;
  std::string exported;
  {
    auto store = OpenRocks(dir.Sub("a"));
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(AdvanceSync(*store, "/objects/b", 20).status.ok());
    ASSERT_TRUE(AdvanceSync(*store, "/objects/a", 10).status.ok());
    ASSERT_TRUE(AdvanceSync(*store, std::string("\x01\xfe", 2), 3).status.ok());
    std::ostringstream out;
    uint64_t count = 0;
    ASSERT_TRUE(ExportTokens(*store, out, &count).ok());
    EXPECT_EQ(count, 3u);
    exported = out.str();
  }
  EXPECT_EQ(exported,
            "{\"key_hex\":\"01fe\",\"token\":3}\n"
            "{\"key\":\"/objects/a\",\"token\":10}\n"
            "{\"key\":\"/objects/b\",\"token\":20}\n");

  auto target = OpenRocks(dir.Sub("b"));
  ASSERT_NE(target, nullptr);
  ASSERT_TRUE(AdvanceSync(*target, "/objects/b", 99).status.ok());  // newer
  std::istringstream in(exported);
  std::vector<TokenRecord> records;
  ASSERT_TRUE(ReadRecords(in, &records).ok());
  ImportSummary summary;
  ASSERT_TRUE(ImportTokens(*target, records, &summary).ok());
  EXPECT_EQ(summary.records, 3u);
  EXPECT_EQ(summary.at_imported, 2u);
  EXPECT_EQ(summary.already_higher, 1u);
  EXPECT_EQ(GetSync(*target, "/objects/a").value, std::optional<uint64_t>(10));
  EXPECT_EQ(GetSync(*target, "/objects/b").value, std::optional<uint64_t>(99));  // not lowered
  EXPECT_EQ(GetSync(*target, std::string("\x01\xfe", 2)).value, std::optional<uint64_t>(3));
}

TEST(ExportImportTest, ImportOfManyRecordsBoundsWhatIsInFlight) {
  TempDir dir;
  auto store = OpenRocks(dir.path(), Durability::kAsync);
  ASSERT_NE(store, nullptr);
  std::vector<TokenRecord> records;
  for (int i = 0; i < 5000; ++i) records.push_back({"/k/" + std::to_string(i % 700), 1u + i});
  ImportSummary summary;
  ASSERT_TRUE(ImportTokens(*store, records, &summary).ok());
  EXPECT_EQ(summary.records, 5000u);
  // The highest token of each key wins, whatever the order of the lines.
  EXPECT_EQ(GetSync(*store, "/k/0").value, std::optional<uint64_t>(1u + 4900));
}

TEST(ExportImportTest, ImportStopsAtTheFirstStoreError) {
  TempDir dir;
  auto base = OpenRocks(dir.path());
  ASSERT_NE(base, nullptr);
  FaultInjectingStore store(std::move(base));
  store.SetFaults(FaultSpec{.fail_writes = true});
  std::vector<TokenRecord> records{{"/a", 1}, {"/b", 2}};
  ImportSummary summary;
  Status s = ImportTokens(store, records, &summary);
  EXPECT_EQ(s.code(), Status::Code::kIoError);
  EXPECT_EQ(summary.records, 0u);
}

TEST(ExportImportTest, ExportReportsAWrongSizedValueAsCorruption) {
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
  auto store = OpenRocks(dir.path());
  ASSERT_NE(store, nullptr);
  std::ostringstream out;
  uint64_t count = 0;
  Status s = ExportTokens(*store, out, &count);
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("'bad'"), std::string::npos) << s.message();
}

TEST(ExportImportTest, ExportOfAClosedStoreIsUnavailable) {
  TempDir dir;
  auto store = OpenRocks(dir.path());
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(RaiseSync(*store, "/ok", 1).status.ok());
  ASSERT_TRUE(store->Close().ok());
  std::ostringstream out;
  uint64_t count = 0;
  EXPECT_EQ(ExportTokens(*store, out, &count).code(), Status::Code::kUnavailable);
}

}  // namespace
}  // namespace fencegate::storage
