#include "fence/canonical_path.h"

#include <array>
#include <boost/url/parse.hpp>
#include <cstdint>

// Why a hand-written pass and not Boost.URL: Boost.URL 1.81's
// normalize_path() decodes "%2F" into '/', which would turn one path segment
// into two and let "/a%2Fb" and "/a/b" name the same key; we must refuse an
// encoded slash instead, and refuse dot segments with parameters and
// invalid UTF-8, which it does not look for. The rules fit in one
// left-to-right pass over the bytes with a 256-entry class table: each
// segment is decoded straight into the output, then checked for "." / ".."
// once it ends.

namespace fencegate::proxy {
namespace {

enum CharClass : uint8_t {
  kInvalid,     // not allowed raw in a path
  kPchar,       // ALPHA DIGIT - . _ ~, sub-delims ! $ & ' ( ) * + , ; = and : @
  kSlash,       // '/'
  kPercent,     // '%'
  kNulByte,     // raw NUL
};

constexpr std::array<uint8_t, 256> MakeClassTable() {
  std::array<uint8_t, 256> t{};  // everything kInvalid (0) by default
  for (int c = 'A'; c <= 'Z'; ++c) t[c] = kPchar;
  for (int c = 'a'; c <= 'z'; ++c) t[c] = kPchar;
  for (int c = '0'; c <= '9'; ++c) t[c] = kPchar;
  for (unsigned char c : {'-', '.', '_', '~', '!', '$', '&', '\'', '(', ')', '*', '+', ',', ';',
                          '=', ':', '@'}) {
    t[c] = kPchar;
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

// "." or "..", alone or followed by parameters (";..."): what a servlet
// container resolves as a dot segment. `dot_only`: the segment is exactly
// "." or ".." (removed by the walk); otherwise it has parameters (refused).
bool IsDotSegment(std::string_view seg, bool* dot_only) {
  const std::string_view name = seg.substr(0, seg.find(';'));
  *dot_only = name.size() == seg.size();
  return name == "." || name == "..";
}

// RFC 3629 UTF-8: no overlong forms, no surrogates, nothing above U+10FFFF.
bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t n = 0;
    unsigned char lo = 0x80;
    unsigned char hi = 0xBF;  // the second byte's range
    if (c >= 0xC2 && c <= 0xDF) {
      n = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 2;
      if (c == 0xE0) lo = 0xA0;  // overlong below U+0800
      if (c == 0xED) hi = 0x9F;  // surrogates U+D800..DFFF
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 3;
      if (c == 0xF0) lo = 0x90;  // overlong below U+10000
      if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
    } else {
      return false;  // a continuation byte, C0/C1 (overlong), F5..FF
    }
    if (i + n >= s.size()) return false;  // cut short
    const auto second = static_cast<unsigned char>(s[i + 1]);
    if (second < lo || second > hi) return false;
    for (size_t k = 2; k <= n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if (b < 0x80 || b > 0xBF) return false;
    }
    i += n + 1;
  }
  return true;
}

// True when the walk below would give `raw` back as the decoded path,
// modulo a trailing slash: only pchar bytes (no '%' to decode), no empty
// segment but a trailing one (no "//"), no "." or ".." segment, with or
// without parameters. `raw` starts with '/'.
bool IsCanonical(std::string_view raw) {
  size_t seg_start = 1;
  for (size_t i = 1;; ++i) {
    if (i == raw.size() || raw[i] == '/') {
      const std::string_view seg = raw.substr(seg_start, i - seg_start);
      bool dot_only = false;
      if (!seg.empty() && seg.front() == '.' && IsDotSegment(seg, &dot_only)) return false;
      if (i == raw.size()) return true;
      if (seg.empty()) return false;  // "//"
      seg_start = i + 1;
      continue;
    }
    if (kClass[static_cast<unsigned char>(raw[i])] != kPchar) return false;
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
    // Only pchar bytes: the path is its own encoding.
    const bool trailing = raw.size() > 1 && raw.back() == '/';
    out->forward.assign(raw);
    out->path.assign(trailing ? raw.substr(0, raw.size() - 1) : raw);
    out->query.assign(query);
    out->has_query = has_query;
    out->trailing_slash = trailing;
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
  bool non_ascii = false;       // a decoded byte >= 0x80: check UTF-8 at the end

  for (size_t i = 1;; ++i) {
    if (i == raw.size() || raw[i] == '/') {
      const std::string_view seg(path.data() + seg_start, path.size() - seg_start);
      ends_with_name = false;
      bool dot_only = false;
      if (seg.empty()) {
        // "//" run or trailing slash: nothing to add.
      } else if (seg.front() == '.' && IsDotSegment(seg, &dot_only)) {
        if (!dot_only) return PathError::kDotParameters;
        if (seg == "..") {
          if (seg_start == 1) return PathError::kEscapesRoot;
          path.resize(seg_start);  // drop "..", path is now ".../prev/"
          path.resize(path.rfind('/', path.size() - 2) + 1);
        } else {
          path.resize(seg_start);
        }
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
      case kPchar:
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
        non_ascii = non_ascii || decoded >= 0x80;
        path.push_back(static_cast<char>(decoded));
        i += 2;
        break;
      }
      case kNulByte:
        return PathError::kNul;
      default:  // kInvalid (kSlash is handled above)
        return PathError::kBadCharacter;
    }
  }

  if (path.size() > 1) path.pop_back();  // the trailing '/' of the invariant
  if (non_ascii && !IsValidUtf8(path)) return PathError::kBadUtf8;
  const bool trailing = !ends_with_name && path.size() > 1;

  out->forward.clear();
  AppendEncodedPath(path, &out->forward);
  if (trailing) out->forward.push_back('/');
  out->path = std::move(path);
  out->query.assign(query);
  out->has_query = has_query;
  out->trailing_slash = trailing;
  return PathError::kNone;
}

}  // namespace

void AppendEncodedPath(std::string_view path, std::string* out) {
  for (char c : path) {
    const auto byte = static_cast<unsigned char>(c);
    const uint8_t cls = kClass[byte];
    if (cls == kPchar || cls == kSlash) {
      out->push_back(c);
    } else {
      out->push_back('%');
      out->push_back(kUpperHex[byte >> 4]);
      out->push_back(kUpperHex[byte & 15]);
    }
  }
}

PathError CanonicalizeDestination(std::string_view value, CanonicalDestination* out) {
  std::string origin;
  std::string path;
  if (value.starts_with('/')) {
    if (value.find_first_of("?#") != std::string_view::npos) return PathError::kBadDestination;
    path.assign(value);
  } else {
    auto url = boost::urls::parse_absolute_uri(value);
    if (!url || !url->has_authority() || url->has_userinfo() || url->has_query() ||
        url->has_fragment() || (url->scheme_id() != boost::urls::scheme::http &&
                                url->scheme_id() != boost::urls::scheme::https)) {
      return PathError::kBadDestination;
    }
    origin.assign(url->scheme()).append("://").append(url->encoded_authority());
    path.assign(url->encoded_path());
    if (path.empty()) path.push_back('/');
  }
  CanonicalTarget target;
  if (PathError e = CanonicalizeTarget(path, &target); e != PathError::kNone) return e;
  out->origin = std::move(origin);
  out->target = std::move(target);
  return PathError::kNone;
}

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
    case PathError::kBadUtf8:
      return "the percent-decoded path is not valid UTF-8";
    case PathError::kBadDestination:
      return "Destination must be an http(s) URI or an absolute path, without query or "
             "fragment";
    case PathError::kDotParameters:
      return "path has a '.' or '..' segment with parameters (such as '..;'), which some "
             "backends resolve as '..'";
  }
  return "invalid path";
}

}  // namespace fencegate::proxy
