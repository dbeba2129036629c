#include "fence/token.h"

#include <limits>

namespace fencegate::proxy {
namespace {

constexpr size_t kMaxTokenDigits = 20;  // digits of 18446744073709551615

TokenParse Malformed(const char* reason) {
  TokenParse p;
  p.status = TokenStatus::kMalformed;
  p.reason = reason;
  return p;
}

// Why the byte at `c` is not a digit, in words a client can act on.
const char* NonDigitReason(char c) {
  switch (c) {
    case '+':
    case '-':
      return "token must not have a sign";
    case ' ':
    case '\t':
      return "token must not contain whitespace";
    case ',':
      return "token must be a single value, not a list";
    case '.':
      return "token must be an integer";
    case 'x':
    case 'X':
      return "token must be decimal, not hexadecimal";
    default:
      return "token must contain only the digits 0-9";
  }
}

}  // namespace

TokenParse ParseTokenValue(std::string_view value) {
  if (value.empty()) return Malformed("token is empty");
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  // Up to 19 digits cannot overflow (10^19 - 1 < 2^64 - 1): only a 20-digit
  // value needs the check. A longer one is refused after the loop, once every
  // byte is known to be a digit (what it accumulates then does not matter).
  const bool may_overflow = value.size() == kMaxTokenDigits;
  bool overflow = false;
  uint64_t v = 0;
  for (char c : value) {
    if (c < '0' || c > '9') return Malformed(NonDigitReason(c));
    const auto d = static_cast<uint64_t>(c - '0');
    // v * 10 + d <= kMax  <=>  v <= (kMax - d) / 10  (exact in integers).
    overflow = overflow || (may_overflow && v > (kMax - d) / 10);
    v = v * 10 + d;
  }
  if (value.size() > kMaxTokenDigits) return Malformed("token has more than 20 digits");
  if (overflow) return Malformed("token is larger than 18446744073709551615");
  TokenParse p;
  p.status = TokenStatus::kOk;
  p.value = v;
  return p;
}

TokenParse ParseTokenHeaders(std::span<const std::string_view> values) {
  if (values.empty()) return TokenParse{};  // kMissing
  if (values.size() > 1) return Malformed("header sent more than once; send exactly one value");
  return ParseTokenValue(values.front());
}

}  // namespace fencegate::proxy
