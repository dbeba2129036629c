#pragma once
// Helpers shared by the config sources; not part of the public interface.

#include <string>
#include <string_view>

namespace fencegate::config::internal {

// True when `text` is a non-empty RFC 9110 token (method and header names).
bool IsHttpToken(std::string_view text);

// Validates a route key template (docs/contract.md, "Keys and canonical
// paths"): literal text plus {path}, {1}..{9} and {header:Name}.
// `capture_count` is the number of capture groups of the route's regex;
// `has_regex` is false for a path_prefix route, where {N} is not allowed.
// Returns "" when valid, otherwise a description of the first problem.
std::string ValidateKeyTemplate(std::string_view key, unsigned capture_count, bool has_regex);

}  // namespace fencegate::config::internal
