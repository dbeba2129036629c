// RestartOnlyChanges: which differences between the running configuration
// and a reloaded one refuse the reload, each named by its field, and which
// a running fencegate applies in place.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "config/restart_fields.h"
#include "test_util.h"

namespace fencegate::config {
namespace {

using testing::kUpstream;
using testing::MustLoad;

std::vector<std::string> Changes(const std::string& running, const std::string& next) {
  return RestartOnlyChanges(MustLoad(running), MustLoad(next));
}

TEST(RestartFieldsTest, SameFileChangesNothing) {
  std::string yaml = std::string(kUpstream) + "listen: \"127.0.0.1:0\"\nstorage: {path: d}\n";
  EXPECT_TRUE(Changes(yaml, yaml).empty());
}

TEST(RestartFieldsTest, LiveFieldsChangeInPlace) {
  std::string before = std::string(kUpstream) +
                       "routes:\n"
                       "  - {name: a, path_prefix: /a/}\n"
                       "limits: {header_timeout: 10s, max_body_bytes: 100}\n"
                       "log: {level: info, access_log: true}\n"
                       "admin: {token: one}\n";
  std::string after =
      "upstream: {url: \"http://127.0.0.1:9000\", timeout: 5s, connect_timeout: 2s}\n"
      "fencing: {token_header: X-Token, forward_token: false}\n"
      "routes:\n"
      "  - {name: a, path_prefix: /a/, mode: shadow, idempotency: 1h}\n"
      "  - {name: b, path_regex: \"^/b/\"}\n"
      "limits: {header_timeout: 2s, max_body_bytes: 200, idle_timeout: 5s}\n"
      "forwarding: {trusted_hops: 1}\n"
      "log: {level: debug, access_log: false}\n"
      "admin: {token: two}\n";
  EXPECT_TRUE(Changes(before, after).empty());
}

TEST(RestartFieldsTest, EachBoundFieldIsNamed) {
  std::string before = std::string(kUpstream) +
                       "listen: \"127.0.0.1:8080\"\n"
                       "threads: 2\n"
                       "storage: {path: one, durability: sync}\n"
                       "admin: {listen: \"127.0.0.1:9901\"}\n"
                       "locks: {listen: \"\"}\n"
                       "limits: {max_waiting_per_key: 10, max_connections_per_client: 0}\n";
  std::string after =
      "upstream: {url: \"http://127.0.0.1:9001\"}\n"
      "listen: \"127.0.0.1:8081\"\n"
      "threads: 3\n"
      "storage: {path: two, durability: async}\n"
      "admin: {listen: \"127.0.0.1:9902\"}\n"
      "locks: {listen: \"127.0.0.1:9903\", max_ttl: 1m}\n"
      "limits: {max_waiting_per_key: 11, max_connections_per_client: 5}\n";
  std::vector<std::string> expected = {
      "listen changes only with a restart",
      "threads changes only with a restart",
      "upstream.url changes only with a restart",
      "storage.path changes only with a restart",
      "storage.durability changes only with a restart",
      "admin.listen changes only with a restart",
      "locks.listen changes only with a restart",
      "locks.max_ttl changes only with a restart",
      "limits.max_waiting_per_key changes only with a restart",
      "limits.max_connections_per_client changes only with a restart",
  };
  EXPECT_EQ(Changes(before, after), expected);
}

TEST(RestartFieldsTest, EtcdFieldsAreNamedOneByOne) {
  std::string before = std::string(kUpstream) +
                       "storage:\n  engine: etcd\n  etcd: {prefix: a/, max_batch: 40}\n";
  std::string after =
      std::string(kUpstream) +
      "storage:\n  engine: etcd\n  etcd: {prefix: b/, max_batch: 1, decision_timeout: 2s,\n"
      "    ownership: {lease_ttl: 4s, name: r2}}\n";
  // The wait follows decision_timeout when it is not set.
  std::vector<std::string> expected = {
      "storage.etcd.prefix changes only with a restart",
      "storage.etcd.decision_timeout changes only with a restart",
      "storage.etcd.ownership.lease_ttl changes only with a restart",
      "storage.etcd.ownership.wait changes only with a restart",
      "storage.etcd.ownership.name changes only with a restart",
      "storage.etcd.max_batch changes only with a restart"};
  EXPECT_EQ(Changes(before, after), expected);
  std::string rocks = std::string(kUpstream);
  std::string etcd = std::string(kUpstream) + "storage: {engine: etcd}\n";
  EXPECT_EQ(Changes(rocks, etcd),
            std::vector<std::string>{"storage.engine changes only with a restart"});
}

TEST(RestartFieldsTest, ListenerTlsIsBoundButItsLineIsNot) {
  std::string tls = "tls: {cert_file: c.pem, key_file: k.pem}\n";
  std::string before = std::string(kUpstream) + tls;
  // The same section two lines lower: moved, not changed.
  std::string moved = std::string(kUpstream) + "threads: 0\nlisten: \"127.0.0.1:8080\"\n" + tls;
  EXPECT_TRUE(Changes(before, moved).empty());
  EXPECT_EQ(Changes(before, std::string(kUpstream)),
            std::vector<std::string>{"tls changes only with a restart"});
}

TEST(RestartFieldsTest, SameAddressWrittenAnotherWayIsNoChange) {
  std::string before = std::string(kUpstream) + "admin: {listen: \"127.0.0.1:9901\"}\n";
  std::string after = std::string(kUpstream) + "admin: {listen: '127.0.0.1:9901', token: t}\n";
  EXPECT_TRUE(Changes(before, after).empty());
}

}  // namespace
}  // namespace fencegate::config
