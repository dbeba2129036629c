#pragma once
// Fencing token parsing (docs/contract.md, "Tokens").

#include <cstdint>
#include <span>
#include <string_view>

namespace fencegate::proxy {

enum class TokenStatus {
  kOk,
  kMissing,    // no header at all -> 428
  kMalformed,  // anything else that is not exactly one valid value -> 400
};

struct TokenParse {
  TokenStatus status = TokenStatus::kMissing;
  uint64_t value = 0;
  const char* reason = "";  // for kMalformed: what is wrong, for the 400 body
};

// Parses one header value: 1..20 ASCII digits (leading zeros allowed),
// value <= 2^64-1. Empty, sign, spaces (leading/trailing/inside), hex,
// overflow, lists ("1,2") are malformed.
TokenParse ParseTokenValue(std::string_view value);

// `values` are all the field values with the token header's name in the
// request, in order. None: kMissing. More than one: kMalformed.
TokenParse ParseTokenHeaders(std::span<const std::string_view> values);

}  // namespace fencegate::proxy
