// Export from the etcd engine against a real etcd
// (tests/support/etcd_process.h): every token under the prefix, page by
// page at one revision, keys decoded as EtcdStore stores them, damaged
// values refused by name, and the export read back by import.

#include "storage/etcd_export.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "storage/etcd_client.h"
#include "storage/etcd_store.h"
#include "storage/export_import.h"
#include "tests/storage/test_util.h"
#include "tests/support/etcd_process.h"

namespace fencegate::storage {
namespace {

using fencegate::testing::EtcdCluster;
using Tokens = std::vector<std::pair<std::string, uint64_t>>;

// Keeps every request the export sends.
class RecordingTransport : public EtcdTransport {
 public:
  explicit RecordingTransport(std::unique_ptr<EtcdTransport> inner) : inner_(std::move(inner)) {}
  Status Call(std::string_view path, const nlohmann::json& request, nlohmann::json* response,
              bool retry_if_unknown, Deadline deadline) override {
    {
      std::lock_guard lock(mu_);
      requests_.emplace_back(std::string(path), request);
    }
    return inner_->Call(path, request, response, retry_if_unknown, deadline);
  }
  std::vector<std::pair<std::string, nlohmann::json>> requests() {
    std::lock_guard lock(mu_);
    return requests_;
  }

 private:
  std::unique_ptr<EtcdTransport> inner_;
  std::mutex mu_;
  std::vector<std::pair<std::string, nlohmann::json>> requests_;
};

// Raises key to token, expecting success.
Fence RaiseOk(TokenStore& store, const std::string& key, uint64_t token) {
  const testing::FenceResult r = testing::RaiseSync(store, key, token);
  EXPECT_TRUE(r.status.ok()) << r.status.ToString();
  return r.fence;
}

class EtcdExportTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string error;
    cluster_ = EtcdCluster::Start({}, &error).release();
    ASSERT_NE(cluster_, nullptr) << error;
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(cluster_, nullptr);
    prefix_ = "export/" +
              std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "/";
  }

  EtcdStoreSettings Settings(const std::string& prefix) const {
    EtcdStoreSettings settings;
    settings.endpoints = cluster_->endpoints();
    settings.prefix = prefix;
    return settings;
  }
  std::unique_ptr<EtcdTransport> Transport() const {
    std::unique_ptr<EtcdTransport> transport;
    Status s = OpenEtcdTransport(Settings(prefix_), &transport);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return transport;
  }
  std::unique_ptr<EtcdStore> Store(const std::string& prefix) const {
    EtcdStoreOptions options;
    options.prefix = prefix;
    std::unique_ptr<EtcdTransport> transport;
    EXPECT_TRUE(OpenEtcdTransport(Settings(prefix), &transport).ok());
    return std::make_unique<EtcdStore>(std::move(transport), options);
  }
  void PutRaw(const std::string& key, const std::string& value) const {
    nlohmann::json put = {{"key", EtcdClient::Base64(key)}, {"value", EtcdClient::Base64(value)}};
    const std::string answer = cluster_->Post(0, "/v3/kv/put", put.dump());
    ASSERT_NE(answer.find("revision"), std::string::npos) << answer;
  }
  Status Scan(EtcdTransport& transport, size_t page, Tokens* out,
              const std::string& prefix = "") const {
    return ForEachEtcdToken(transport, prefix.empty() ? prefix_ : prefix, page,
                            [&](const std::string& key, uint64_t token) {
                              out->emplace_back(key, token);
                              return true;
                            });
  }

  static EtcdCluster* cluster_;
  std::string prefix_;
};

EtcdCluster* EtcdExportTest::cluster_ = nullptr;

// 23 tokens read 4 at a time: six range reads, every one bounded, in
// byte order, keys with any byte and of the longest length, tokens from 0
// to the largest; records and neighbouring prefixes are not tokens.
TEST_F(EtcdExportTest, ReadsEveryTokenPageByPageInByteOrder) {
  auto store = Store(prefix_);
  std::map<std::string, uint64_t> want;
  for (int i = 0; i < 20; ++i) want["/objects/" + std::to_string(i)] = 100 + i;
  want[std::string("k\0ey\xff", 5)] = 0;
  want[std::string(EtcdStore::kMaxKeyBytes, 'z')] = UINT64_MAX;
  want["/objects/\xc3\xa9t\xc3\xa9"] = 7;
  for (const auto& [key, token] : want) RaiseOk(*store, key, token);
  ASSERT_TRUE(store->Close().ok());
  PutRaw(prefix_ + "i/a-record", "not a token, and not exported");
  PutRaw(prefix_ + "u/beside", "00000000000000000001");
  PutRaw(prefix_.substr(0, prefix_.size() - 1) + "x/t/other", "00000000000000000001");

  RecordingTransport recording(Transport());
  Tokens got;
  Status s = Scan(recording, 4, &got);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(got, Tokens(want.begin(), want.end()));

  const auto requests = recording.requests();
  ASSERT_EQ(requests.size(), 6u) << "23 keys, 4 a page";
  std::string revision;
  for (size_t i = 0; i < requests.size(); ++i) {
    const auto& [path, request] = requests[i];
    EXPECT_EQ(path, "/v3/kv/range");
    EXPECT_EQ(request.value("limit", ""), "4") << "every read is bounded: " << request.dump();
    std::string end;
    ASSERT_TRUE(EtcdClient::FromBase64(request.value("range_end", ""), &end));
    EXPECT_EQ(end, prefix_ + "t0") << "the range is the prefix's";
    EXPECT_FALSE(request.value("serializable", false)) << "reads are linearizable";
    if (i == 0) {
      EXPECT_FALSE(request.contains("revision"));
    } else {
      ASSERT_TRUE(request.contains("revision"));
      if (i == 1) revision = request["revision"];
      EXPECT_EQ(request["revision"], revision) << "every page at the first page's revision";
    }
  }
}

// A page boundary that falls on the last key, one key, and nothing at all.
TEST_F(EtcdExportTest, PagesThatEndExactlyAndEmptyPrefixes) {
  auto store = Store(prefix_);
  for (int i = 0; i < 6; ++i) RaiseOk(*store, "/k" + std::to_string(i), i + 1);
  ASSERT_TRUE(store->Close().ok());
  for (const size_t page : {1, 2, 3, 6, 1000}) {
    RecordingTransport recording(Transport());
    Tokens got;
    ASSERT_TRUE(Scan(recording, page, &got).ok());
    EXPECT_EQ(got.size(), 6u) << "page " << page;
    EXPECT_EQ(recording.requests().size(), (6 + page - 1) / page) << "page " << page;
  }
  auto transport = Transport();
  Tokens none;
  ASSERT_TRUE(Scan(*transport, 3, &none, prefix_ + "nothing/").ok());
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(Scan(*transport, 0, &none).code(), Status::Code::kInvalidArgument);
}

// Writes made while the export reads come after its revision: the export
// shows the store as it was when it began.
TEST_F(EtcdExportTest, TheExportIsOneRevision) {
  auto store = Store(prefix_);
  for (int i = 0; i < 6; ++i) RaiseOk(*store, "/k" + std::to_string(i), 10);
  auto transport = Transport();
  Tokens got;
  bool wrote = false;
  Status s = ForEachEtcdToken(*transport, prefix_, 2, [&](const std::string& key, uint64_t token) {
    if (!wrote) {
      RaiseOk(*store, "/k5", 99);
      RaiseOk(*store, "/k9", 99);
      wrote = true;
    }
    got.emplace_back(key, token);
    return true;
  });
  ASSERT_TRUE(s.ok()) << s.ToString();
  Tokens want;
  for (int i = 0; i < 6; ++i) want.emplace_back("/k" + std::to_string(i), 10);
  EXPECT_EQ(got, want);
  Tokens after;
  ASSERT_TRUE(Scan(*transport, 2, &after).ok());
  EXPECT_EQ(after.size(), 7u);
}

// A value that is not 20 digits stops the export with Corruption naming
// the key, bytes that are not printable escaped; nothing is skipped.
TEST_F(EtcdExportTest, ADamagedValueIsAnErrorNamingTheKey) {
  auto store = Store(prefix_);
  RaiseOk(*store, "/a", 1);
  RaiseOk(*store, "/c", 3);
  ASSERT_TRUE(store->Close().ok());
  PutRaw(prefix_ + "t//b\x01", "12");
  auto transport = Transport();
  Tokens got;
  Status s = Scan(*transport, 1, &got);
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("'" + prefix_ + "t//b\\x01' holds '12'"), std::string::npos)
      << s.message();
  EXPECT_EQ(got, (Tokens{{"/a", 1}}));

  PutRaw(prefix_ + "t//b\x01", "00000000000000000002");
  PutRaw(prefix_ + "t/", "00000000000000000002");  // an empty key
  got.clear();
  s = Scan(*transport, 1000, &got);
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("'" + prefix_ + "t/' holds no token's key"), std::string::npos)
      << s.message();
}

// ExportStore on the etcd engine writes the export format, and importing
// it into another prefix gives the same tokens back.
TEST_F(EtcdExportTest, ExportStoreWritesLinesThatImportReadsBack) {
  auto store = Store(prefix_);
  RaiseOk(*store, "/objects/a", 34);
  RaiseOk(*store, std::string("bin\xff", 4), 5);
  TreeWrite tree;  // a collection DELETE of /objects/d
  tree.keys = {"/objects/d"};
  tree.token = 35;
  tree.targets = {TreeTarget{"/objects/d", "/objects/d", /*subtree=*/true, Nesting::kPerKey}};
  ASSERT_EQ(testing::AdvanceTreeSync(*store, tree).verdict.kind, TreeVerdict::Kind::kAccepted);
  const testing::NodeResult node = testing::GetNodeSync(*store, "/objects/d");
  const testing::NodeResult root = testing::GetNodeSync(*store, "/");
  ASSERT_TRUE(node.node.has_value() && root.node.has_value());
  ASSERT_TRUE(store->Close().ok());
  StoreOptions options;
  options.engine = "etcd";
  options.etcd = Settings(prefix_);
  std::ostringstream out;
  ExportSummary count;
  Status s = ExportStore(options, out, &count);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(count.keys, 3u);
  EXPECT_EQ(count.paths, 1u);
  EXPECT_EQ(out.str(),
            "{\"key\":\"/objects/a\",\"token\":34}\n"
            "{\"key\":\"/objects/d\",\"token\":35}\n"
            "{\"key_hex\":\"62696eff\",\"token\":5}\n"
            "{\"path\":\"/objects/d\",\"key\":\"/objects/d\",\"token\":35,\"subtree\":35}\n");

  std::istringstream in(out.str());
  std::vector<TokenRecord> records;
  ASSERT_TRUE(ReadRecords(in, &records).ok());
  auto copy = Store(prefix_ + "copy/");
  ImportSummary summary;
  ASSERT_TRUE(ImportTokens(*copy, records, &summary).ok());
  EXPECT_EQ(summary.at_imported, 3u);
  EXPECT_EQ(summary.paths, 1u);
  EXPECT_EQ(testing::GetNodeSync(*copy, "/objects/d").node, node.node);
  EXPECT_EQ(testing::GetNodeSync(*copy, "/").node, root.node);
  ASSERT_TRUE(copy->Close().ok());
  auto transport = Transport();
  Tokens original;
  Tokens copied;
  ASSERT_TRUE(Scan(*transport, 1, &original).ok());
  ASSERT_TRUE(Scan(*transport, 1, &copied, prefix_ + "copy/").ok());
  EXPECT_EQ(copied, original);
}

TEST(EtcdExportDown, AnEtcdThatDoesNotAnswerIsUnavailable) {
  std::vector<uint16_t> ports = fencegate::testing::etcd_process_detail::FreePorts(1);
  StoreOptions options;
  options.engine = "etcd";
  options.etcd.endpoints = {"http://127.0.0.1:" + std::to_string(ports[0])};
  options.etcd.timeout = std::chrono::milliseconds(200);
  std::ostringstream out;
  ExportSummary count;
  Status s = ExportStore(options, out, &count);
  EXPECT_EQ(s.code(), Status::Code::kUnavailable) << s.ToString();
  EXPECT_EQ(out.str(), "");
}

}  // namespace
}  // namespace fencegate::storage
