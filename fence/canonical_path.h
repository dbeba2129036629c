#pragma once
// Canonical path (the contract's "keys and canonical paths"), computed once
// per request before routing, so that one backend resource can never be
// reached under two keys: two spellings that a common backend resolves to
// the same resource decode to the same canonical path, or are refused.
//
// Two forms of one path:
//  - `path`, the decoded form: every percent-escape decoded, dot segments
//    removed, slash runs merged, no trailing slash. Routes match it and keys
//    are made from it.
//  - `forward`, what the backend receives: `path` re-encoded by one rule
//    (AppendEncodedPath), plus the request's trailing slash, if it had one.

#include <string>
#include <string_view>

namespace fencegate::proxy {

struct CanonicalTarget {
  std::string path;     // decoded canonical path, starts with '/', no trailing '/' but "/"
  std::string forward;  // `path` re-encoded, with the request's trailing slash
  std::string query;    // raw query without '?', "" when none (not part of keys)
  bool has_query = false;
  bool trailing_slash = false;  // the request's path ended with '/' (not "/")
};

enum class PathError {
  kNone,
  kNotOriginForm,     // target is not "/..." (absolute-form/authority/asterisk)
  kEscapesRoot,       // ".." above "/"
  kEncodedSlash,      // %2F or %5C (either case)
  kNul,               // raw NUL or %00
  kBadEncoding,       // '%' not followed by two hex digits
  kBadCharacter,      // a byte not allowed raw in a path (control chars, space, '\\', non-ASCII)
  kBadUtf8,           // the decoded path is not valid UTF-8 (overlong forms included)
  kDotParameters,     // a "." or ".." segment with parameters (".;x", "..;"), which
                      // servlet containers resolve as the dot segment
  kBadDestination,    // a Destination header that is not an http(s) URI or an
                      // absolute path, or that has a query or fragment
};

// Canonicalizes a request target in origin-form ("/a//b/./c?x=1"):
//  - splits off the query (kept raw, never part of keys; only NUL, control
//    bytes, space and DEL are refused in it, since it is forwarded verbatim
//    in the request line)
//  - percent-decodes every escape, hex in either case, but %2F and %5C
//    (kEncodedSlash) and %00 (kNul); the decoded bytes must be valid UTF-8
//  - merges repeated slashes, removes "." and ".." segments (after decoding,
//    so "%2e%2e" is ".."); a ".." that would leave the root is an error, and
//    so is a dot segment with parameters ("..;", ".;x")
//  - drops a trailing slash from `path` ("/a/b/" is "/a/b"), kept in
//    `forward` and `trailing_slash`
// Returns kNone and fills *out on success; on error *out is left untouched.
PathError CanonicalizeTarget(std::string_view target, CanonicalTarget* out);

// The Destination header of a COPY or MOVE (RFC 4918 section 10.3): an
// absolute URI or an absolute path, canonicalized as request targets are.
struct CanonicalDestination {
  std::string origin;      // "scheme://authority" as sent, "" for a path
  CanonicalTarget target;  // its path (never a query)
};
// Returns kNone and fills *out, or the error (*out left untouched).
PathError CanonicalizeDestination(std::string_view value, CanonicalDestination* out);

// Appends `path` (a decoded canonical path) re-encoded for the request line:
// '/' separates segments; within a segment the bytes of RFC 3986's pchar
// that need no escape (ALPHA DIGIT - . _ ~, the sub-delims ! $ & ' ( ) * + ,
// ; = and : @) are written as they are, every other byte as %XX with
// upper-case hex. Decoding the result gives `path` back.
void AppendEncodedPath(std::string_view path, std::string* out);

namespace detail {
// CanonicalizeTarget without its shortcut for a path that is canonical
// already: every path goes through the segment walk. Tests compare the two.
PathError CanonicalizeTargetWalk(std::string_view target, CanonicalTarget* out);
}  // namespace detail

// Human-readable reason for a PathError, for the 400 body.
const char* PathErrorMessage(PathError e);

}  // namespace fencegate::proxy
