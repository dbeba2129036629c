// EtcdClient against a real etcd (tests/support/etcd_process.h), and
// against fake members that cannot serve (etcd_fake_gateway.h).

#include "storage/etcd_client.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tests/storage/etcd_client_util.h"
#include "tests/storage/etcd_fake_gateway.h"
#include "tests/support/etcd_process.h"

namespace fencegate::storage {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using fencegate::testing::EtcdCluster;
using testing::FakeGateway;
using Clock = std::chrono::steady_clock;
using testing::Connect;
using testing::PutRequest;
using testing::ValueOf;

// Slack on the bound of a call's duration, for a busy machine or a
// sanitizer build: a bound catches a call that outlives its deadline by far
// (the 30 s cap, or no end), never a slow one.
constexpr milliseconds kSlack{10000};

// An endpoint where nothing listens: a port bound once, then released.
std::string ClosedEndpoint() {
  const std::vector<uint16_t> ports = fencegate::testing::etcd_process_detail::FreePorts(1);
  return "http://127.0.0.1:" + std::to_string(ports.at(0));
}

// A request to the real etcd must not time out on a busy machine; the fake
// members answer at once, or never (and then the test sets its timeout).
std::unique_ptr<EtcdClient> Connect(std::vector<std::string> endpoints,
                                    milliseconds request_timeout = milliseconds(10000)) {
  EtcdClientOptions options;
  options.endpoints = std::move(endpoints);
  options.request_timeout = request_timeout;
  return Connect(options);
}

TEST(EtcdClientHelpers, Base64RoundTripsEveryByte) {
  std::string all;
  for (int i = 0; i < 256; ++i) all.push_back(static_cast<char>(i));
  EXPECT_EQ(EtcdClient::Base64(""), "");
  EXPECT_EQ(EtcdClient::Base64(std::string("a\0b", 3)), "YQBi");
  EXPECT_EQ(EtcdClient::Base64("ab"), "YWI=");
  for (size_t n : {size_t{0}, size_t{1}, size_t{2}, size_t{3}, size_t{255}, size_t{256}}) {
    std::string back;
    ASSERT_TRUE(EtcdClient::FromBase64(EtcdClient::Base64(all.substr(0, n)), &back)) << n;
    EXPECT_EQ(back, all.substr(0, n));
  }
  std::string big(100000, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7);
  std::string back;
  ASSERT_TRUE(EtcdClient::FromBase64(EtcdClient::Base64(big), &back));
  EXPECT_EQ(back, big);
}

TEST(EtcdClientHelpers, FromBase64RefusesWhatIsNotCanonical) {
  std::string out;
  for (const char* bad : {"QQ", "QQ=A", "Q===", " QQ==", "QQ==\n", "Q!==", "QUJD QQ==", "====",
                          "YW-i", "YW_i"}) {
    EXPECT_FALSE(EtcdClient::FromBase64(bad, &out)) << bad;
  }
  ASSERT_TRUE(EtcdClient::FromBase64("QQ==", &out));
  EXPECT_EQ(out, "A");
}

TEST(EtcdClientHelpers, Int64FieldReadsTheGatewaysStrings) {
  const json object = json::parse(
      R"({"revision":"42","lease":"-7","n":5,"big":"9223372036854775807","bad":"12x",
          "over":"9223372036854775808","float":1.5,"empty":""})");
  int64_t v = -1;
  EXPECT_TRUE(EtcdClient::Int64Field(object, "revision", &v));
  EXPECT_EQ(v, 42);
  EXPECT_TRUE(EtcdClient::Int64Field(object, "lease", &v));
  EXPECT_EQ(v, -7);
  EXPECT_TRUE(EtcdClient::Int64Field(object, "n", &v));
  EXPECT_EQ(v, 5);
  EXPECT_TRUE(EtcdClient::Int64Field(object, "big", &v));
  EXPECT_EQ(v, INT64_MAX);
  EXPECT_TRUE(EtcdClient::Int64Field(object, "absent", &v));  // the gateway omits 0
  EXPECT_EQ(v, 0);
  for (const char* bad : {"bad", "over", "float", "empty"}) {
    EXPECT_FALSE(EtcdClient::Int64Field(object, bad, &v)) << bad;
  }
}

TEST(EtcdClientOpen, RefusesWhatIsNoEndpoint) {
  std::unique_ptr<EtcdClient> client;
  for (const char* bad : {"ftp://127.0.0.1:2379", "http://", "http://127.0.0.1:0",
                          "http://127.0.0.1:2379/v3", "http://user@127.0.0.1:2379",
                          "https://127.0.0.1:2379"}) {
    EtcdClientOptions options;
    options.endpoints = {bad};
    EXPECT_EQ(EtcdClient::Open(options, &client).code(), Status::Code::kInvalidArgument) << bad;
  }
  EXPECT_EQ(EtcdClient::Open(EtcdClientOptions{}, &client).code(), Status::Code::kInvalidArgument);
  EtcdClientOptions good;
  good.endpoints = {"http://[::1]:2379", "http://localhost", "http://127.0.0.1:2379/"};
  EXPECT_TRUE(EtcdClient::Open(good, &client).ok());
}

// One etcd member for the suite.
class EtcdClientTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    etcd_ = EtcdCluster::Start({}, &start_error_);
  }
  static void TearDownTestSuite() { etcd_.reset(); }
  void SetUp() override { ASSERT_NE(etcd_, nullptr) << start_error_; }

  // A key of this test's own.
  static std::string Key(const std::string& name) {
    return std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "/" +
           name;
  }

  inline static std::unique_ptr<EtcdCluster> etcd_;
  inline static std::string start_error_;
};

TEST_F(EtcdClientTest, PutAndRangeKeepBinaryKeysAndValues) {
  auto client = Connect({etcd_->endpoint(0)});
  const std::string key = Key(std::string("a\0b\xff", 4));
  const std::string shorter = Key("a");
  const std::string value("\0\x01\x02zero\0", 8);
  json answer;
  ASSERT_TRUE(client->Call("/v3/kv/put", PutRequest(key, value), &answer, false).ok());
  ASSERT_TRUE(client->Call("/v3/kv/put", PutRequest(shorter, "short"), &answer, false).ok());
  int64_t revision = 0;
  ASSERT_TRUE(EtcdClient::Int64Field(answer["header"], "revision", &revision));
  EXPECT_GT(revision, 0);

  EXPECT_EQ(ValueOf(*client, key), value);
  EXPECT_EQ(ValueOf(*client, shorter), "short");  // the NUL did not cut the first key short
  EXPECT_EQ(ValueOf(*client, Key(std::string("a\0c", 3))), std::nullopt);
}

// A fence in one txn: absent -> put; else value < token -> put; else range.
json FenceTxn(const std::string& key, const std::string& token) {
  const std::string k = EtcdClient::Base64(key);
  const std::string v = EtcdClient::Base64(token);
  json nested = {
      {"compare", {{{"key", k}, {"target", "VALUE"}, {"result", "LESS"}, {"value", v}}}},
      {"success", {{{"request_put", {{"key", k}, {"value", v}}}}}},
      {"failure", {{{"request_range", {{"key", k}}}}}}};
  return {{"compare",
           {{{"key", k}, {"target", "CREATE"}, {"result", "EQUAL"}, {"create_revision", "0"}}}},
          {"success", {{{"request_put", {{"key", k}, {"value", v}}}}}},
          {"failure", {{{"request_txn", nested}}}}};
}

TEST_F(EtcdClientTest, NestedTxnTakesEachBranch) {
  auto client = Connect({etcd_->endpoint(0)});
  const std::string key = Key("fence");
  json answer;
  // Absent: the outer success branch.
  ASSERT_TRUE(client->Call("/v3/kv/txn", FenceTxn(key, "005"), &answer, false).ok());
  EXPECT_EQ(answer.value("succeeded", false), true) << answer.dump();
  EXPECT_TRUE(answer["responses"][0].contains("response_put")) << answer.dump();

  // Present and lower: the nested success branch.
  ASSERT_TRUE(client->Call("/v3/kv/txn", FenceTxn(key, "007"), &answer, false).ok());
  EXPECT_EQ(answer.value("succeeded", false), false) << answer.dump();
  const json inner = answer["responses"][0]["response_txn"];
  EXPECT_EQ(inner.value("succeeded", false), true) << answer.dump();
  EXPECT_TRUE(inner["responses"][0].contains("response_put")) << answer.dump();

  // Present and not lower: the nested failure branch reads the stored value.
  ASSERT_TRUE(client->Call("/v3/kv/txn", FenceTxn(key, "006"), &answer, false).ok());
  const json refused = answer["responses"][0]["response_txn"];
  EXPECT_EQ(refused.value("succeeded", false), false) << answer.dump();
  std::string current;
  ASSERT_TRUE(EtcdClient::FromBase64(
      refused["responses"][0]["response_range"]["kvs"][0].value("value", ""), &current))
      << answer.dump();
  EXPECT_EQ(current, "007");
  EXPECT_EQ(ValueOf(*client, key), "007");
}

TEST_F(EtcdClientTest, EtcdErrorsBecomeStatuses) {
  auto client = Connect({etcd_->endpoint(0)});
  json answer;
  Status s = client->Call("/v3/lease/revoke", {{"ID", "12345"}}, &answer, true);
  EXPECT_EQ(s.code(), Status::Code::kNotFound) << s.ToString();
  EXPECT_NE(s.message().find("requested lease not found"), std::string::npos) << s.ToString();
  s = client->Call("/v3/kv/range", {{"key", 1}}, &answer, true);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
  s = client->Call("/v3/kv/nothing", json::object(), &answer, true);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("HTTP 404"), std::string::npos) << s.ToString();
  // The connection still serves after errors.
  s = client->Call("/v3/maintenance/status", json::object(), &answer, true);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(answer.value("version", ""), "3.4.23") << answer.dump();
}

TEST_F(EtcdClientTest, FailsOverFromAClosedPort) {
  auto client = Connect({ClosedEndpoint(), etcd_->endpoint(0)});
  json answer;
  bool maybe_applied = true;
  const Status s =
      client->Call("/v3/kv/put", PutRequest(Key("k"), "v"), &answer, false, &maybe_applied);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_FALSE(maybe_applied);  // a refused connection carried nothing
  EXPECT_EQ(client->current_endpoint(), etcd_->endpoint(0));
  EXPECT_EQ(ValueOf(*client, Key("k")), "v");
}

TEST_F(EtcdClientTest, NoLeaderFailsOverEvenWhenARepeatIsUnsafe) {
  FakeGateway leaderless(FakeGateway::EtcdError(503, 14, "etcdserver: no leader"));
  auto client = Connect({leaderless.endpoint(), etcd_->endpoint(0)});
  json answer;
  bool maybe_applied = true;
  const Status s =
      client->Call("/v3/kv/put", PutRequest(Key("k"), "v"), &answer, false, &maybe_applied);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(leaderless.requests(), 1);
  EXPECT_FALSE(maybe_applied);  // "no leader" comes before anything is proposed
  EXPECT_EQ(ValueOf(*client, Key("k")), "v");
}

// Answers after which the request may or may not have been applied.
TEST_F(EtcdClientTest, UnknownOutcomesAreNotRepeatedUnlessSafe) {
  const std::string bad_gateway =
      "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 3\r\nConnection: close\r\n\r\nno\n";
  int n = 0;
  for (const std::string& reply :
       {FakeGateway::EtcdError(503, 14, "etcdserver: request timed out"),
        FakeGateway::EtcdError(503, 14, "transport is closing"), bad_gateway}) {
    SCOPED_TRACE(reply);
    const std::string once = Key("once" + std::to_string(n));
    const std::string twice = Key("twice" + std::to_string(n++));
    FakeGateway member(reply);
    auto client = Connect({member.endpoint(), etcd_->endpoint(0)});
    json answer;
    bool maybe_applied = false;
    Status s = client->Call("/v3/kv/put", PutRequest(once, "v"), &answer, false, &maybe_applied);
    EXPECT_EQ(s.code(), Status::Code::kUnavailable) << s.ToString();
    EXPECT_NE(s.message().find("outcome unknown"), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find(member.endpoint()), std::string::npos) << s.ToString();
    EXPECT_TRUE(maybe_applied);
    EXPECT_EQ(member.requests(), 1);
    EXPECT_EQ(ValueOf(*client, once), std::nullopt);  // the second member never got it

    auto retrying = Connect({member.endpoint(), etcd_->endpoint(0)});
    s = retrying->Call("/v3/kv/put", PutRequest(twice, "v"), &answer, true, &maybe_applied);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_TRUE(maybe_applied);  // it may have been applied twice
    EXPECT_EQ(ValueOf(*retrying, twice), "v");
  }
}

TEST_F(EtcdClientTest, SilentMemberTimesOutAsUnknown) {
  FakeGateway silent("");
  auto client = Connect({silent.endpoint(), etcd_->endpoint(0)}, milliseconds(500));
  json answer;
  bool maybe_applied = false;
  const auto start = Clock::now();
  Status s = client->Call("/v3/kv/put", PutRequest(Key("k"), "v"), &answer, false, &maybe_applied);
  const auto took = Clock::now() - start;
  EXPECT_EQ(s.code(), Status::Code::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("outcome unknown"), std::string::npos) << s.ToString();
  EXPECT_TRUE(maybe_applied);
  // One attempt's timeout, not the call's: a bound, with slack for a busy machine.
  EXPECT_LT(took, milliseconds(500) + kSlack);
  EXPECT_EQ(ValueOf(*client, Key("k")), std::nullopt);

  auto retrying = Connect({silent.endpoint(), etcd_->endpoint(0)}, milliseconds(500));
  s = retrying->Call("/v3/kv/put", PutRequest(Key("k"), "v"), &answer, true, &maybe_applied);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(maybe_applied);
  EXPECT_EQ(ValueOf(*retrying, Key("k")), "v");
}

TEST(EtcdClientDown, EveryEndpointDownIsUnavailableWithinTheDeadline) {
  FakeGateway silent("");
  const std::string closed = ClosedEndpoint();
  EtcdClientOptions options;
  options.endpoints = {silent.endpoint(), closed};
  options.request_timeout = milliseconds(300);
  options.total_timeout = milliseconds(1500);
  auto client = Connect(options);
  json answer;
  bool maybe_applied = true;
  const auto start = Clock::now();
  const Status s = client->Call("/v3/kv/range", {{"key", "YQ=="}}, &answer, true, &maybe_applied);
  const auto took = Clock::now() - start;
  EXPECT_EQ(s.code(), Status::Code::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("no endpoint served /v3/kv/range (2 endpoints, deadline 1500 ms)"), std::string::npos)
      << s.ToString();
  EXPECT_TRUE(s.message().find(closed) != std::string::npos ||
              s.message().find(silent.endpoint()) != std::string::npos)
      << s.ToString();
  EXPECT_TRUE(maybe_applied);  // the silent one took the request
  EXPECT_GE(silent.requests(), 1);
  // The deadline bounds the call: slack for a busy machine, not a speed test.
  EXPECT_LT(took, milliseconds(1500) + kSlack);

  EtcdClientOptions once = options;
  once.endpoints = {ClosedEndpoint(), ClosedEndpoint()};
  once.retry_backoff = milliseconds(0);
  auto one_round = Connect(once);
  const Status refused = one_round->Call("/v3/kv/range", {{"key", "YQ=="}}, &answer, false,
                                         &maybe_applied);
  EXPECT_EQ(refused.code(), Status::Code::kUnavailable) << refused.ToString();
  EXPECT_NE(refused.message().find("connect"), std::string::npos) << refused.ToString();
  EXPECT_FALSE(maybe_applied);
}

}  // namespace
}  // namespace fencegate::storage
