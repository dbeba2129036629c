#include "storage/token_store.h"

#include <algorithm>
#include <string_view>

namespace fencegate::storage {

Status CheckTokenKey(std::string_view key, size_t max_key_bytes) {
  if (key.size() > max_key_bytes) {
    return Status::InvalidArgument("key is " + std::to_string(key.size()) +
                                   " bytes, the limit is " + std::to_string(max_key_bytes));
  }
  if (IsRecordKey(key)) {
    return Status::InvalidArgument(
        "key begins with a NUL byte and 'i', which the store keeps for idempotency records");
  }
  return Status::Ok();
}

Status CheckBatchItems(const std::vector<KeyToken>& items, size_t max_key_bytes) {
  if (items.empty()) return Status::InvalidArgument("no key to advance");
  if (items.size() > kMaxBatchItems) {
    return Status::InvalidArgument(std::to_string(items.size()) +
                                   " keys in one advance, the limit is " +
                                   std::to_string(kMaxBatchItems));
  }
  std::vector<std::string_view> keys;
  keys.reserve(items.size());
  for (const KeyToken& item : items) {
    if (item.key.empty()) return Status::InvalidArgument("an empty key");
    if (Status s = CheckTokenKey(item.key, max_key_bytes); !s.ok()) return s;
    keys.emplace_back(item.key);
  }
  std::sort(keys.begin(), keys.end());
  if (std::adjacent_find(keys.begin(), keys.end()) != keys.end()) {
    return Status::InvalidArgument("a key is named twice in one advance");
  }
  return Status::Ok();
}

}  // namespace fencegate::storage
