#include "storage/token_store.h"

#include <algorithm>
#include <string_view>

namespace fencegate::storage {

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
    if (item.key.size() > max_key_bytes) {
      return Status::InvalidArgument("key is " + std::to_string(item.key.size()) +
                                     " bytes, the limit is " + std::to_string(max_key_bytes));
    }
    keys.emplace_back(item.key);
  }
  std::sort(keys.begin(), keys.end());
  if (std::adjacent_find(keys.begin(), keys.end()) != keys.end()) {
    return Status::InvalidArgument("a key is named twice in one advance");
  }
  return Status::Ok();
}

}  // namespace fencegate::storage
