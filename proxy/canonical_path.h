#pragma once
// Canonical path (SPEC section 3), computed once per request before routing,
// so that one backend resource can never be reached under two keys.

#include <string>
#include <string_view>

namespace fencegate::proxy {

struct CanonicalTarget {
  std::string path;   // canonical path, always starts with '/'
  std::string query;  // raw query without '?', "" when none (not part of keys)
  bool has_query = false;
};

enum class PathError {
  kNone,
  kNotOriginForm,     // target is not "/..." (absolute-form/authority/asterisk)
  kEscapesRoot,       // ".." above "/"
  kEncodedSlash,      // %2F or %5C (either case)
  kNul,               // raw NUL or %00
  kBadEncoding,       // '%' not followed by two hex digits
  kBadCharacter,      // a byte not allowed in a path (control chars, space, '\\', non-ASCII)
};

// Canonicalizes a request target in origin-form ("/a//b/./c?x=1"):
//  - splits off the query (kept raw, not canonicalized, never part of keys;
//    only NUL, control bytes, space and DEL are refused in it, since it is
//    forwarded verbatim in the request line)
//  - percent-decodes unreserved characters (ALPHA DIGIT - . _ ~); other
//    percent-escapes are kept, with hex digits upper-cased ("%c3" -> "%C3")
//  - merges repeated slashes, removes "." and ".." segments (after decoding,
//    so "%2e%2e" is ".."); a ".." that would leave the root is an error
//  - keeps a trailing slash ("/a/b/" stays "/a/b/")
// Returns kNone and fills *out on success; on error *out is left untouched.
PathError CanonicalizeTarget(std::string_view target, CanonicalTarget* out);

namespace detail {
// CanonicalizeTarget without its shortcut for a path that is canonical
// already: every path goes through the segment walk. Tests compare the two.
PathError CanonicalizeTargetWalk(std::string_view target, CanonicalTarget* out);
}  // namespace detail

// Human-readable reason for a PathError, for the 400 body.
const char* PathErrorMessage(PathError e);

}  // namespace fencegate::proxy
