#pragma once
// Decoding of admin requests (docs/contract.md, "Admin API"), without
// sockets: the key in the target, an idempotency record's target, the
// bearer token check and the fence body.
// AdminSession calls these; unit tests and the admin_request fuzz target
// drive them directly.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace fencegate::proxy {

// The admin API's families of targets.
inline constexpr std::string_view kKeysPrefix = "/v1/keys/";
inline constexpr std::string_view kIdempotencyPrefix = "/v1/idempotency/";

// Splits "/v1/keys/<enc>" or "/v1/keys/<enc>/fence" and percent-decodes the
// key. Returns false when the target is not of that shape or not valid
// percent-encoding, or when the key decodes to nothing.
bool ParseAdminKeyTarget(std::string_view target, std::string* key, bool* fence);

// The parts of "/v1/idempotency/<route>/<key>", each one percent-encoded
// path segment, with an optional query "?scope=<scope>", percent-encoded
// ('+' is a plus sign, not a space: a scope may hold a base64 credential).
struct IdempotencyTarget {
  std::string route;
  std::string key;    // the client's key as sent (not yet checked)
  std::string scope;  // "" without ?scope= (a route without a scope)
};

// Splits and decodes such a target into *out. False when it is not of that
// shape: a route or key that is not one segment, decodes to nothing or is
// not valid percent-encoding; a query with anything but one "scope".
bool ParseIdempotencyTarget(std::string_view target, IdempotencyTarget* out);

// "" when a decoded admin key can be a key at all, else why not (for a 400
// bad_key): longer than kMaxKeyBytes, as no route's key can be
// (docs/contract.md, "Keys and canonical paths"), and as the store would
// refuse it.
std::string CheckAdminKey(std::string_view key);

// Compares without an early exit, so the time taken does not reveal how
// much of a secret matched (only the lengths).
bool ConstantTimeEquals(std::string_view a, std::string_view b);

// True when `authorization` (the Authorization header's value) is
// "Bearer <token>" with the scheme in any case and the credential equal to
// `token`, compared in constant time. An empty `token` never matches.
bool BearerMatches(std::string_view authorization, std::string_view token);

// A fence body: its token, or what is wrong with it.
struct FenceBody {
  std::optional<uint64_t> token;
  // Without a token, for the 400: "bad_token" when "token" is there but its
  // value is not a token, "bad_request" for the rest of the body.
  std::string code;
  std::string message;
};

// Parses a fence body {"token": N}: one JSON object whose only member is
// "token", once, and N a JSON number whose value is an integer from 0 to
// 2^64-1. The number's text is read exactly, so an exponent or a fraction
// is fine when the value is an integer (1e3, 1000.0), and no double
// rounding reaches the store. Refused: not JSON, not an object, "token"
// missing or twice, any other member, a value that is not a number (a
// string of digits too), negative, not an integer, or too large.
FenceBody ParseFenceBody(std::string_view body);

}  // namespace fencegate::proxy
