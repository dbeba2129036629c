#include "proxy/request_id.h"

#include <cstdint>
#include <random>
#include <string>
#include <string_view>

namespace fencegate::proxy {

bool IsValidRequestId(std::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.' || c == ':';
    if (!ok) return false;
  }
  return true;
}

void NewRequestId(std::string* id) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  id->resize(32);
  char* out = id->data();
  for (int half = 0; half < 2; ++half) {
    uint64_t v = rng();
    for (int i = 0; i < 16; ++i) out[half * 16 + i] = kHex[(v >> (i * 4)) & 0xF];
  }
}

}  // namespace fencegate::proxy
