#pragma once
// Decoding of admin requests (SPEC section 6), without sockets: the key in
// the target, the bearer token check and the fence body. AdminSession calls
// these; unit tests and the admin_request fuzz target drive them directly.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace fencegate::proxy {

// Splits "/v1/keys/<enc>" or "/v1/keys/<enc>/fence" and percent-decodes the
// key. Returns false when the target is not of that shape or not valid
// percent-encoding, or when the key decodes to nothing.
bool ParseAdminKeyTarget(std::string_view target, std::string* key, bool* fence);

// Compares without an early exit, so the time taken does not reveal how
// much of a secret matched (only the lengths).
bool ConstantTimeEquals(std::string_view a, std::string_view b);

// True when `authorization` (the Authorization header's value) is
// "Bearer <token>" with the scheme in any case and the credential equal to
// `token`, compared in constant time. An empty `token` never matches.
bool BearerMatches(std::string_view authorization, std::string_view token);

// The token of a fence body {"token": N}: N an unsigned 64-bit JSON number
// or a decimal string in the token header's syntax. nullopt for anything
// else (not JSON, not an object, no "token", negative, fractional, too big).
std::optional<uint64_t> ParseFenceBody(std::string_view body);

}  // namespace fencegate::proxy
