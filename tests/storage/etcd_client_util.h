#pragma once
// What the etcd client tests do with a client: open one, put a key, read
// a key back, each expecting success.

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "storage/etcd_client.h"

namespace fencegate::storage::testing {

inline std::unique_ptr<EtcdClient> Connect(const EtcdClientOptions& options) {
  std::unique_ptr<EtcdClient> client;
  const Status s = EtcdClient::Open(options, &client);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return client;
}

// The body of a /v3/kv/put that stores `value` under `key`.
inline nlohmann::json PutRequest(const std::string& key, const std::string& value) {
  return {{"key", EtcdClient::Base64(key)}, {"value", EtcdClient::Base64(value)}};
}

// The value stored under `key` (nullopt when absent), by a range.
inline std::optional<std::string> ValueOf(EtcdClient& client, const std::string& key) {
  nlohmann::json answer;
  const Status s = client.Call("/v3/kv/range", {{"key", EtcdClient::Base64(key)}}, &answer, true);
  EXPECT_TRUE(s.ok()) << s.ToString();
  if (!answer.contains("kvs")) return std::nullopt;
  EXPECT_EQ(answer["kvs"].size(), 1u) << answer.dump();
  std::string value;
  EXPECT_TRUE(EtcdClient::FromBase64(answer["kvs"][0].value("value", ""), &value));
  return value;
}

}  // namespace fencegate::storage::testing
