#pragma once
// Helpers shared by the config sources; not part of the public interface.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "config/config.h"

namespace fencegate::config::internal {

// True when `text` is a non-empty RFC 9110 token (method and header names).
bool IsHttpToken(std::string_view text);

// The fewest insertions, deletions, substitutions and swaps of two
// neighbouring characters that turn `a` into `b` (the optimal string
// alignment distance), case-sensitive. Written here because neither the
// standard library nor Boost has one.
size_t EditDistance(std::string_view a, std::string_view b);

// Validates a route key template (docs/contract.md, "Keys and canonical
// paths"): literal text plus {path}, {1}..{9} and {header:Name}.
// `capture_count` is the number of capture groups of the route's regex;
// `has_regex` is false for a path_prefix route, where {N} is not allowed.
// Returns "" when valid, otherwise a description of the first problem.
std::string ValidateKeyTemplate(std::string_view key, unsigned capture_count, bool has_regex);

// "65536", "512KiB", "1MiB", "2GiB" -> bytes: plain digits are bytes, a
// suffix KiB, MiB or GiB multiplies by 1024, 1024^2 or 1024^3. No sign,
// space, fraction or decimal unit (kB, MB: 1000 or 1024 would be a guess).
// nullopt when malformed or above what uint64_t holds.
std::optional<uint64_t> ParseSize(std::string_view text);
// `bytes` in the largest binary unit that divides it: "64MiB", "1500".
std::string FormatSize(uint64_t bytes);

}  // namespace fencegate::config::internal
