#include "storage/token_store.h"

#include <algorithm>
#include <string_view>

namespace fencegate::storage {

std::string PrintableKey(std::string_view bytes, size_t max) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (const char c : bytes.substr(0, max)) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f && c != '\\') {
      out += c;
    } else {
      out.append("\\x").append(1, kDigits[u >> 4]).append(1, kDigits[u & 0xf]);
    }
  }
  if (bytes.size() > max) out += "...";
  return out;
}

Status CheckTokenKey(std::string_view key, size_t max_key_bytes) {
  if (key.size() > max_key_bytes) {
    return Status::InvalidArgument("key is " + std::to_string(key.size()) +
                                   " bytes, the limit is " + std::to_string(max_key_bytes));
  }
  if (IsRecordKey(key) || IsTreeKey(key)) {
    return Status::InvalidArgument(
        "key begins with a NUL byte and 'i' or 't', which the store keeps for its own records");
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

Status CheckTreeWrite(const TreeWrite& write, size_t max_key_bytes) {
  if (write.keys.size() > kMaxBatchItems) {
    return Status::InvalidArgument(std::to_string(write.keys.size()) +
                                   " keys in one advance, the limit is " +
                                   std::to_string(kMaxBatchItems));
  }
  std::vector<std::string_view> keys(write.keys.begin(), write.keys.end());
  for (std::string_view key : keys) {
    if (key.empty()) return Status::InvalidArgument("an empty key");
    if (Status s = CheckTokenKey(key, max_key_bytes); !s.ok()) return s;
  }
  std::sort(keys.begin(), keys.end());
  if (std::adjacent_find(keys.begin(), keys.end()) != keys.end()) {
    return Status::InvalidArgument("a key is named twice in one advance");
  }
  if (write.targets.empty() || write.targets.size() > 2) {
    return Status::InvalidArgument("a tree write has one target or two");
  }
  for (const TreeTarget& t : write.targets) {
    if (t.path.size() > kMaxTreePathBytes) {
      return Status::InvalidArgument("a tree target's path is " + std::to_string(t.path.size()) +
                                     " bytes, the limit is " + std::to_string(kMaxTreePathBytes));
    }
  }
  return Status::Ok();
}

// The interface's signatures: an engine takes both by value to keep them.
// NOLINTNEXTLINE(performance-unnecessary-value-param)
void TokenStore::AdvanceTree(TreeWrite /*write*/, TreeHandler handler) {
  handler(Status::Unavailable("this token store keeps no tree of paths"), TreeVerdict{});
}

// NOLINTNEXTLINE(performance-unnecessary-value-param): as AdvanceTree
void TokenStore::GetNode(std::string /*path*/, NodeHandler handler) {
  handler(Status::Unavailable("this token store keeps no tree of paths"), std::nullopt);
}

}  // namespace fencegate::storage
