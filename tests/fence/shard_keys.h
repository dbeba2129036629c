#pragma once
// Keys that KeyQueue puts in one shard, all of one length: `prefix` and a
// four-digit number. Tests of what a shard keeps between keys use them.

#include <string>
#include <string_view>
#include <vector>

#include "fence/key_queue.h"

namespace fencegate::testing {

inline std::vector<std::string> KeysOfOneShard(std::string_view prefix, size_t n) {
  std::vector<std::string> keys;
  for (int i = 1000; keys.size() < n; ++i) {
    std::string k = std::string(prefix) + std::to_string(i);
    if (keys.empty() || proxy::KeyQueue::ShardOf(k) == proxy::KeyQueue::ShardOf(keys[0])) {
      keys.push_back(std::move(k));
    }
  }
  return keys;
}

}  // namespace fencegate::testing
