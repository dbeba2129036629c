#include "proxy/canonical_path.h"

#include <array>
#include <cstdint>

// Why a hand-written pass and not Boost.URL: Boost.URL 1.81's
// normalize_path() decodes "%2F" into '/', which would turn one path segment
// into two and let "/a%2Fb" and "/a/b" name the same key; we must refuse an
// encoded slash instead. It also decodes more than the unreserved set and
// allocates per step. The rules of SPEC section 3 fit in one left-to-right
// pass over the bytes with a 256-entry class table: each segment is decoded
// straight into the output, then checked for "." / ".." once it ends.

namespace fencegate::proxy {
namespace {

enum CharClass : uint8_t {
  kInvalid,     // not allowed raw in a path
  kUnreserved,  // ALPHA DIGIT - . _ ~  (decoded when percent-encoded)
  kOtherPchar,  // sub-delims ! $ & ' ( ) * + , ; = and : @  (kept as is)
  kSlash,       // '/'
  kPercent,     // '%'
  kNulByte,     // raw NUL
};

constexpr std::array<uint8_t, 256> MakeClassTable() {
  std::array<uint8_t, 256> t{};  // everything kInvalid (0) by default
  for (int c = 'A'; c <= 'Z'; ++c) t[c] = kUnreserved;
  for (int c = 'a'; c <= 'z'; ++c) t[c] = kUnreserved;
  for (int c = '0'; c <= '9'; ++c) t[c] = kUnreserved;
  for (unsigned char c : {'-', '.', '_', '~'}) t[c] = kUnreserved;
  for (unsigned char c : {'!', '$', '&', '\'', '(', ')', '*', '+', ',', ';', '=', ':', '@'}) {
    t[c] = kOtherPchar;
  }
  t['/'] = kSlash;
  t['%'] = kPercent;
  t[0] = kNulByte;
  return t;
}

constexpr std::array<uint8_t, 256> kClass = MakeClassTable();

// -1 when `c` is not a hex digit.
constexpr int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

constexpr char kUpperHex[] = "0123456789ABCDEF";

// The query is forwarded verbatim into the upstream request line, so bytes
// that would break that line (NUL, other controls, space, DEL) are refused;
// everything else is left alone (the query is never part of a key).
PathError CheckQuery(std::string_view query) {
  for (char ch : query) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == 0) return PathError::kNul;
    if (c <= 0x20 || c == 0x7f) return PathError::kBadCharacter;
  }
  return PathError::kNone;
}

// True when the walk below would return `raw` unchanged: only bytes kept as
// they are (no '%' to decode or upper-case), no empty segment but a trailing
// one (no "//"), no "." or ".." segment. `raw` starts with '/'.
bool IsCanonical(std::string_view raw) {
  size_t seg_start = 1;
  for (size_t i = 1;; ++i) {
    if (i == raw.size() || raw[i] == '/') {
      const std::string_view seg = raw.substr(seg_start, i - seg_start);
      if (seg == "." || seg == "..") return false;
      if (i == raw.size()) return true;
      if (seg.empty()) return false;  // "//"
      seg_start = i + 1;
      continue;
    }
    const uint8_t c = kClass[static_cast<unsigned char>(raw[i])];
    if (c != kUnreserved && c != kOtherPchar) return false;
  }
}

// The query: kept raw; only bytes that would break the request line refused.
PathError SplitQuery(std::string_view target, std::string_view* raw, std::string_view* query,
                     bool* has_query) {
  const size_t qmark = target.find('?');
  *raw = target.substr(0, qmark);
  *has_query = qmark != std::string_view::npos;
  if (*has_query) {
    *query = target.substr(qmark + 1);
    return CheckQuery(*query);
  }
  return PathError::kNone;
}

// CanonicalizeTarget; `shortcut`: a canonical path is copied, not walked.
PathError Canonicalize(std::string_view target, CanonicalTarget* out, bool shortcut) {
  if (target.empty() || target.front() != '/') return PathError::kNotOriginForm;
  std::string_view raw;
  std::string_view query;
  bool has_query = false;
  if (PathError e = SplitQuery(target, &raw, &query, &has_query); e != PathError::kNone) return e;
  if (shortcut && IsCanonical(raw)) {
    // Most paths: copied as they are, into the strings' kept capacity.
    out->path.assign(raw);
    out->query.assign(query);
    out->has_query = has_query;
    return PathError::kNone;
  }

  // Invariant: `path` always ends with '/'. Each segment is decoded and
  // appended at seg_start; when the segment ends (at '/' or the end) it is
  // dropped (empty, "."), pops the previous one (".."), or gets its '/'.
  std::string path;
  path.reserve(raw.size() + 1);
  path.push_back('/');
  size_t seg_start = 1;
  bool ends_with_name = false;  // the last segment was a regular name

  for (size_t i = 1;; ++i) {
    if (i == raw.size() || raw[i] == '/') {
      const std::string_view seg(path.data() + seg_start, path.size() - seg_start);
      ends_with_name = false;
      if (seg.empty()) {
        // "//" run or trailing slash: nothing to add.
      } else if (seg == ".") {
        path.resize(seg_start);
      } else if (seg == "..") {
        if (seg_start == 1) return PathError::kEscapesRoot;
        path.resize(seg_start);  // drop "..", path is now ".../prev/"
        path.resize(path.rfind('/', path.size() - 2) + 1);
      } else {
        path.push_back('/');
        ends_with_name = true;
      }
      if (i == raw.size()) break;
      seg_start = path.size();
      continue;
    }

    const char c = raw[i];
    switch (kClass[static_cast<unsigned char>(c)]) {
      case kUnreserved:
      case kOtherPchar:
        path.push_back(c);
        break;
      case kPercent: {
        if (i + 2 >= raw.size()) return PathError::kBadEncoding;  // needs two more bytes
        const int hi = HexValue(raw[i + 1]);
        const int lo = HexValue(raw[i + 2]);
        if (hi < 0 || lo < 0) return PathError::kBadEncoding;
        const auto decoded = static_cast<unsigned char>(hi * 16 + lo);
        if (decoded == 0) return PathError::kNul;
        if (decoded == '/' || decoded == '\\') return PathError::kEncodedSlash;
        if (kClass[decoded] == kUnreserved) {
          path.push_back(static_cast<char>(decoded));
        } else {
          path.push_back('%');
          path.push_back(kUpperHex[hi]);
          path.push_back(kUpperHex[lo]);
        }
        i += 2;
        break;
      }
      case kNulByte:
        return PathError::kNul;
      default:  // kInvalid (kSlash is handled above)
        return PathError::kBadCharacter;
    }
  }

  if (ends_with_name) path.pop_back();

  out->path = std::move(path);
  out->query.assign(query);
  out->has_query = has_query;
  return PathError::kNone;
}

}  // namespace

PathError CanonicalizeTarget(std::string_view target, CanonicalTarget* out) {
  return Canonicalize(target, out, /*shortcut=*/true);
}

PathError detail::CanonicalizeTargetWalk(std::string_view target, CanonicalTarget* out) {
  return Canonicalize(target, out, /*shortcut=*/false);
}

const char* PathErrorMessage(PathError e) {
  switch (e) {
    case PathError::kNone:
      return "ok";
    case PathError::kNotOriginForm:
      return "request target must be an absolute path starting with '/'";
    case PathError::kEscapesRoot:
      return "path uses '..' to leave the root";
    case PathError::kEncodedSlash:
      return "path contains an encoded slash or backslash (%2F or %5C)";
    case PathError::kNul:
      return "path contains a NUL byte";
    case PathError::kBadEncoding:
      return "path contains invalid percent-encoding";
    case PathError::kBadCharacter:
      return "path contains a character that is not allowed in a URL path";
  }
  return "invalid path";
}

}  // namespace fencegate::proxy
