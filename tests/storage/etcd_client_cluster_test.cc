// EtcdClient against etcd set up as production runs it: three members, one
// of which dies; authentication turned on.

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "storage/etcd_client.h"
#include "tests/storage/etcd_client_util.h"
#include "tests/support/etcd_process.h"

namespace fencegate::storage {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using fencegate::testing::EtcdCluster;
using Clock = std::chrono::steady_clock;
using testing::Connect;
using testing::PutRequest;
using testing::ValueOf;


TEST(EtcdClientCluster, CallsSurviveTheLeadersDeath) {
  EtcdCluster::Options three;
  three.members = 3;
  std::string error;
  auto etcd = EtcdCluster::Start(three, &error);
  ASSERT_NE(etcd, nullptr) << error;
  int leader = -1;
  for (const auto until = Clock::now() + std::chrono::seconds(30);
       leader < 0 && Clock::now() < until;) {
    leader = etcd->Leader();
    if (leader < 0) std::this_thread::sleep_for(milliseconds(20));
  }
  ASSERT_GE(leader, 0) << "no member says it leads";
  const auto dead = static_cast<size_t>(leader);

  // The leader first: the call after its death starts there.
  EtcdClientOptions options;
  options.endpoints.push_back(etcd->endpoint(dead));
  for (size_t i = 0; i < etcd->size(); ++i) {
    if (i != dead) options.endpoints.push_back(etcd->endpoint(i));
  }
  // The calls after the kill that may not be repeated get one attempt: it
  // must not time out while the new leader settles on a busy machine. The
  // dead member refuses at once.
  options.request_timeout = milliseconds(5000);
  options.total_timeout = milliseconds(20000);  // an election, on a busy machine
  auto client = Connect(options);
  json answer;
  Status s = client->Call("/v3/kv/put", PutRequest("k", "1"), &answer, true);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(client->current_endpoint(), etcd->endpoint(dead));

  etcd->Kill(dead);
  s = client->Call("/v3/kv/put", PutRequest("k", "2"), &answer, true);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_NE(client->current_endpoint(), etcd->endpoint(dead));
  EXPECT_EQ(ValueOf(*client, "k"), "2");
  for (int i = 0; i < 5; ++i) {
    s = client->Call("/v3/kv/put", PutRequest("k" + std::to_string(i), "v"), &answer, false);
    EXPECT_TRUE(s.ok()) << s.ToString();
  }

  // Back on its ports and data, it rejoins and serves what it missed.
  ASSERT_TRUE(etcd->Restart(dead, &error)) << error;
  EtcdClientOptions alone = options;
  alone.endpoints = {etcd->endpoint(dead)};
  auto rejoined = Connect(alone);
  EXPECT_EQ(ValueOf(*rejoined, "k"), "2");
  EXPECT_EQ(ValueOf(*rejoined, "k4"), "v");
}

TEST(EtcdClientRestart, AConnectionTheMemberClosedIsNotTakenForAnUnknownOutcome) {
  std::string error;
  auto etcd = EtcdCluster::Start({}, &error);
  ASSERT_NE(etcd, nullptr) << error;
  EtcdClientOptions options;
  options.endpoints = {etcd->endpoint(0)};
  options.retry_backoff = milliseconds(0);
  auto client = Connect(options);
  json answer;
  Status s = client->Call("/v3/kv/put", PutRequest("k", "1"), &answer, false);
  ASSERT_TRUE(s.ok()) << s.ToString();

  // The kept-alive connection dies with the member; the next call sees that
  // before it writes, so nothing was sent on it, and it opens a new one.
  ASSERT_TRUE(etcd->Restart(0, &error)) << error;
  bool maybe_applied = true;
  s = client->Call("/v3/kv/put", PutRequest("k", "2"), &answer, false, &maybe_applied);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_FALSE(maybe_applied);
  EXPECT_EQ(ValueOf(*client, "k"), "2");
}

TEST(EtcdClientAuth, CallsNeedCredentialsAndOutliveTheirToken) {
  std::string error;
  auto etcd = EtcdCluster::Start({}, &error);
  ASSERT_NE(etcd, nullptr) << error;
  ASSERT_TRUE(etcd->EnableAuth("pw", &error)) << error;
  json answer;

  EtcdClientOptions options;
  options.endpoints = {etcd->endpoint(0)};
  auto anonymous = Connect(options);
  Status s = anonymous->Call("/v3/kv/put", PutRequest("k", "v"), &answer, false);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("user name is empty"), std::string::npos) << s.ToString();

  options.username = "root";
  options.password = "wrong";
  auto wrong = Connect(options);
  s = wrong->Call("/v3/kv/put", PutRequest("k", "v"), &answer, false);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("authentication failed"), std::string::npos) << s.ToString();

  options.password = "pw";
  auto root = Connect(options);
  s = root->Call("/v3/kv/put", PutRequest("k", "v"), &answer, false);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(ValueOf(*root, "k"), "v");

  // Turning authentication off and on again drops every token: one taken
  // now (as the client's was, earlier) stops working.
  const json token = json::parse(
      etcd->Post(0, "/v3/auth/authenticate", R"({"name":"root","password":"pw"})"), nullptr,
      false);
  ASSERT_TRUE(token.contains("token")) << token.dump();
  const std::string with_token = "Authorization: " + token["token"].get<std::string>() + "\r\n";
  const std::string range = R"({"key":"aw=="})";
  ASSERT_NE(etcd->Post(0, "/v3/kv/range", range, with_token).find("\"kvs\""), std::string::npos);
  ASSERT_TRUE(etcd->Etcdctl({"--user=root:pw", "auth", "disable"}, &error)) << error;
  ASSERT_TRUE(etcd->Etcdctl({"auth", "enable"}, &error)) << error;
  ASSERT_NE(etcd->Post(0, "/v3/kv/range", range, with_token).find("invalid auth token"),
            std::string::npos);

  // The client authenticates again and its call goes through, once.
  bool maybe_applied = true;
  s = root->Call("/v3/kv/put", PutRequest("k", "w"), &answer, false, &maybe_applied);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_FALSE(maybe_applied);
  EXPECT_EQ(ValueOf(*root, "k"), "w");
}

}  // namespace
}  // namespace fencegate::storage
