// Export/import of fences (storage/export_import.h) over a real RocksDbStore.

#include "storage/export_import.h"

#include <algorithm>
#include <memory>
#include <optional>
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
using testing::AdvanceTreeSync;
using testing::GetNodeSync;
using testing::GetSync;
using testing::OpenRocks;
using testing::RaiseSync;
using testing::TempDir;

TEST(ExportImportTest, FormatIsOneJsonObjectPerKey) {
  EXPECT_EQ(FormatRecord({"/objects/a", 34, {}, {}}), R"({"key":"/objects/a","token":34})");
  EXPECT_EQ(FormatRecord({"k", 18446744073709551615ull, {}, {}}),
            R"({"key":"k","token":18446744073709551615})");
  // Not UTF-8: hex, never mangled.
  EXPECT_EQ(FormatRecord({std::string("a\xff", 2), 1, {}, {}}), R"({"key_hex":"61ff","token":1})");
}

TEST(ExportImportTest, APathRecordNamesThePathFirstAndItsSubtreeWriteLast) {
  EXPECT_EQ(FormatRecord({"/objects/d", 34, "/objects/d", {}}),
            R"({"path":"/objects/d","key":"/objects/d","token":34})");
  EXPECT_EQ(FormatRecord({"tenant/acme", 35, "/tenants/acme", 35}),
            R"({"path":"/tenants/acme","key":"tenant/acme","token":35,"subtree":35})");
  EXPECT_EQ(FormatRecord({"k", 1, std::string("/a\xff", 3), {}}),
            R"({"path_hex":"2f61ff","key":"k","token":1})");

  TokenRecord r;
  bool blank = false;
  ASSERT_TRUE(ParseRecord(R"({"path":"/t/a","key":"t","token":9,"subtree":4})", &r, &blank).ok());
  EXPECT_EQ(r.path, "/t/a");
  EXPECT_EQ(r.key, "t");
  EXPECT_EQ(r.token, 9u);
  EXPECT_EQ(r.subtree, std::optional<uint64_t>(4));
  ASSERT_TRUE(ParseRecord(R"({"path_hex":"2f61ff","key":"k","token":1})", &r, &blank).ok());
  EXPECT_EQ(r.path, std::string("/a\xff", 3));
  EXPECT_EQ(r.subtree, std::nullopt);
  for (const char* bad : {
           R"({"key":"k","token":1,"subtree":1})",                 // subtree without a path
           R"({"path":"/a/","key":"k","token":1})",                // a trailing slash
           R"({"path":"a","key":"k","token":1})",                  // not absolute
           R"({"path":"/a//b","key":"k","token":1})",              // an empty segment
           R"({"path":"/a","path_hex":"2f61","key":"k","token":1})",  // both path forms
           R"({"path_hex":"2f6","key":"k","token":1})",            // odd hex
           R"({"path":"/a","token":1})",                           // no key
           R"({"path":"/a","key":"k","token":1,"subtree":-2})",    // negative
       }) {
    EXPECT_FALSE(ParseRecord(bad, &r, &blank).ok()) << bad;
  }
  std::string deep;
  for (size_t i = 0; i <= kMaxTreeDepth; ++i) deep += "/s";
  EXPECT_FALSE(ParseRecord(R"({"path":")" + deep + R"(","key":"k","token":1})", &r, &blank).ok());
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
      R"({"key_hex":"0069","token":1})",          // the store's own records' prefix
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
  std::vector<TokenRecord> records{{"stale", 1, {}, {}}};
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
    ExportSummary count;
    ASSERT_TRUE(ExportTokens(*store, out, &count).ok());
    EXPECT_EQ(count.keys, 3u);
    EXPECT_EQ(count.paths, 0u);
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

// The tree of paths travels with the keys: what a store exported decides a
// write over nested paths the same way in the store it is imported into.
TEST(ExportImportTest, TheTreeRoundTripsAndDecidesAsBefore) {
  TempDir dir;
  auto write = [](std::string key, uint64_t token, std::string path, bool subtree,
                  Nesting nesting = Nesting::kPerKey) {
    TreeWrite w;
    w.keys = {key};
    w.token = token;
    w.targets = {TreeTarget{std::move(path), std::move(key), subtree, nesting}};
    return w;
  };
  const std::vector<TreeWrite> writes = {
      write("/objects/d/x", 5, "/objects/d/x", false),
      write("/objects/d", 7, "/objects/d", true, Nesting::kShared),  // a collection DELETE
      write("/objects/d", 8, "/objects/d", false),
      write("tenant/acme", 3, "/tenants/acme/inv/7", false),
  };
  std::string exported;
  auto source = OpenRocks(dir.Sub("a"));
  ASSERT_NE(source, nullptr);
  for (const TreeWrite& w : writes) {
    ASSERT_EQ(AdvanceTreeSync(*source, w).verdict.kind, TreeVerdict::Kind::kAccepted);
  }
  {
    std::ostringstream out;
    ExportSummary count;
    ASSERT_TRUE(ExportTokens(*source, out, &count).ok());
    EXPECT_EQ(count.keys, 3u);
    EXPECT_EQ(count.paths, 3u);  // the fenced paths, not their ancestors
    exported = out.str();
  }
  EXPECT_EQ(exported,
            "{\"key\":\"/objects/d\",\"token\":8}\n"
            "{\"key\":\"/objects/d/x\",\"token\":5}\n"
            "{\"key\":\"tenant/acme\",\"token\":3}\n"
            "{\"path\":\"/objects/d\",\"key\":\"/objects/d\",\"token\":8,\"subtree\":7}\n"
            "{\"path\":\"/objects/d/x\",\"key\":\"/objects/d/x\",\"token\":5}\n"
            "{\"path\":\"/tenants/acme/inv/7\",\"key\":\"tenant/acme\",\"token\":3}\n");

  auto target = OpenRocks(dir.Sub("b"));
  ASSERT_NE(target, nullptr);
  std::istringstream in(exported);
  std::vector<TokenRecord> records;
  ASSERT_TRUE(ReadRecords(in, &records).ok());
  ImportSummary summary;
  ASSERT_TRUE(ImportTokens(*target, records, &summary).ok());
  EXPECT_EQ(summary.records, 6u);
  EXPECT_EQ(summary.paths, 3u);
  // Every node as the source has it, the ancestors' summaries included (the
  // keys below in any order: import raises paths side by side).
  auto sorted = [](std::optional<TreeNode> node) {
    if (node) {
      TreeBelowKeys::List below = node->below_keys.list();
      std::sort(below.begin(), below.end(),
                [](const TreeNode::Below& a, const TreeNode::Below& b) { return a.key < b.key; });
      node->below_keys.assign(std::move(below));
    }
    return node;
  };
  for (const std::string path : {"/", "/objects", "/objects/d", "/objects/d/x", "/tenants",
                                 "/tenants/acme", "/tenants/acme/inv", "/tenants/acme/inv/7"}) {
    const testing::NodeResult want = GetNodeSync(*source, path);
    const testing::NodeResult got = GetNodeSync(*target, path);
    ASSERT_TRUE(want.status.ok() && got.status.ok()) << path;
    ASSERT_TRUE(want.node.has_value()) << path;
    EXPECT_EQ(sorted(got.node), sorted(want.node)) << path;
  }
  // A collection DELETE above members of other keys: refused in both.
  for (TokenStore* store : {static_cast<TokenStore*>(source.get()),
                            static_cast<TokenStore*>(target.get())}) {
    EXPECT_EQ(AdvanceTreeSync(*store, write("/objects", 100, "/objects", true)).verdict.kind,
              TreeVerdict::Kind::kNestedKeys);
    EXPECT_EQ(AdvanceTreeSync(*store, write("/objects/d", 6, "/objects/d/y", false)).verdict.kind,
              TreeVerdict::Kind::kStaleKey);
  }
}

TEST(ExportImportTest, ImportOfManyRecordsBoundsWhatIsInFlight) {
  TempDir dir;
  auto store = OpenRocks(dir.path(), Durability::kAsync);
  ASSERT_NE(store, nullptr);
  std::vector<TokenRecord> records;
  for (int i = 0; i < 5000; ++i) records.push_back({"/k/" + std::to_string(i % 700), 1u + i, {}, {}});
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
  std::vector<TokenRecord> records{{"/a", 1, {}, {}}, {"/b", 2, {}, {}}};
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
  ExportSummary count;
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
  ExportSummary count;
  EXPECT_EQ(ExportTokens(*store, out, &count).code(), Status::Code::kUnavailable);
}

}  // namespace
}  // namespace fencegate::storage
