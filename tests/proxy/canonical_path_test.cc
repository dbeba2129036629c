#include "proxy/canonical_path.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>
#include <vector>

namespace fencegate::proxy {
namespace {

using namespace std::string_literals;  // "..."s keeps embedded NULs

struct OkCase {
  std::string target;
  std::string path;
  std::string query;
  bool has_query;
};

void PrintTo(const OkCase& c, std::ostream* os) { *os << '"' << c.target << '"'; }

class CanonicalOk : public ::testing::TestWithParam<OkCase> {};

TEST_P(CanonicalOk, Canonicalizes) {
  const OkCase& c = GetParam();
  CanonicalTarget out;
  ASSERT_EQ(CanonicalizeTarget(c.target, &out), PathError::kNone) << c.target;
  EXPECT_EQ(out.path, c.path) << c.target;
  EXPECT_EQ(out.query, c.query) << c.target;
  EXPECT_EQ(out.has_query, c.has_query) << c.target;
}

INSTANTIATE_TEST_SUITE_P(
    Spec, CanonicalOk,
    ::testing::Values(
        // SPEC section 3 examples.
        OkCase{"//objects//a", "/objects/a", "", false},
        OkCase{"/objects/./a", "/objects/a", "", false},
        OkCase{"/objects/x/../a", "/objects/a", "", false},
        OkCase{"/objects/%61", "/objects/a", "", false}, OkCase{"/a?b=%2F", "/a", "b=%2F", true},
        // Plain paths stay as they are.
        OkCase{"/", "/", "", false}, OkCase{"/objects/a", "/objects/a", "", false},
        OkCase{"/a/b/c.txt", "/a/b/c.txt", "", false},
        // Slash runs merge, trailing slash is kept.
        OkCase{"//", "/", "", false}, OkCase{"///a///b///", "/a/b/", "", false},
        OkCase{"/a/b/", "/a/b/", "", false}, OkCase{"/a//", "/a/", "", false},
        // Dot segments.
        OkCase{"/.", "/", "", false}, OkCase{"/./", "/", "", false},
        OkCase{"/./a", "/a", "", false}, OkCase{"/a/.", "/a/", "", false},
        OkCase{"/a/..", "/", "", false}, OkCase{"/a/b/..", "/a/", "", false},
        OkCase{"/a/b/../", "/a/", "", false}, OkCase{"/a/b/../../c", "/c", "", false},
        OkCase{"/a/./b/./../c/", "/a/c/", "", false}, OkCase{"/a//..//b", "/b", "", false},
        OkCase{"/a/b/c/../../../", "/", "", false},
        // Only exact "." and ".." are dot segments.
        OkCase{"/a/...", "/a/...", "", false}, OkCase{"/a/..b", "/a/..b", "", false},
        OkCase{"/a/b..", "/a/b..", "", false}, OkCase{"/a/.b/", "/a/.b/", "", false},
        // Dot segments count after decoding.
        OkCase{"/a/%2e%2e/b", "/b", "", false}, OkCase{"/a/%2E%2E/b", "/b", "", false},
        OkCase{"/a/.%2e/b", "/b", "", false}, OkCase{"/a/%2e./b", "/b", "", false},
        OkCase{"/a/%2e/b", "/a/b", "", false}, OkCase{"/a/%2e", "/a/", "", false},
        // Unreserved escapes are decoded (any case), others kept upper-cased.
        OkCase{"/%41%5a%61%7A%30%39%2D%2e%5F%7e", "/AZaz09-._~", "", false},
        OkCase{"/a%20b", "/a%20b", "", false}, OkCase{"/caf%c3%a9", "/caf%C3%A9", "", false},
        OkCase{"/caf%C3%A9", "/caf%C3%A9", "", false}, OkCase{"/a%3fb", "/a%3Fb", "", false},
        OkCase{"/a%25", "/a%25", "", false}, OkCase{"/a%2b%2B", "/a%2B%2B", "", false},
        OkCase{"/%7b%7d", "/%7B%7D", "", false}, OkCase{"/x%3a%40", "/x%3A%40", "", false},
        // Raw sub-delims, ':' and '@' are allowed and kept.
        OkCase{"/!$&'()*+,;=:@", "/!$&'()*+,;=:@", "", false},
        OkCase{"/a-b_c.d~e", "/a-b_c.d~e", "", false},
        // Query: split at the first '?', kept raw, never canonicalized.
        OkCase{"/a?", "/a", "", true}, OkCase{"/?x", "/", "x", true},
        OkCase{"/a?b?c", "/a", "b?c", true}, OkCase{"/a/../b?x=../y//z", "/b", "x=../y//z", true},
        OkCase{"/a?%zz%00%2f", "/a", "%zz%00%2f", true},
        OkCase{"/a?q=\xC3\xA9&r=<>", "/a", "q=\xC3\xA9&r=<>", true},
        OkCase{"/%61?%61", "/a", "%61", true}));

struct ErrCase {
  std::string target;
  PathError error;
};

void PrintTo(const ErrCase& c, std::ostream* os) {
  *os << '"';
  for (unsigned char ch : c.target) {
    if (ch < 0x20 || ch >= 0x7f) {
      static const char* hex = "0123456789ABCDEF";
      *os << "\\x" << hex[ch >> 4] << hex[ch & 15];
    } else {
      *os << ch;
    }
  }
  *os << '"';
}

class CanonicalError : public ::testing::TestWithParam<ErrCase> {};

TEST_P(CanonicalError, Refuses) {
  const ErrCase& c = GetParam();
  CanonicalTarget out;
  EXPECT_EQ(CanonicalizeTarget(c.target, &out), c.error);
}

INSTANTIATE_TEST_SUITE_P(NotOriginForm, CanonicalError,
                         ::testing::Values(ErrCase{"", PathError::kNotOriginForm},
                                           ErrCase{"a/b", PathError::kNotOriginForm},
                                           ErrCase{"*", PathError::kNotOriginForm},
                                           ErrCase{"http://host/a", PathError::kNotOriginForm},
                                           ErrCase{"host:80", PathError::kNotOriginForm},
                                           ErrCase{"?a", PathError::kNotOriginForm},
                                           ErrCase{" /a", PathError::kNotOriginForm}));

INSTANTIATE_TEST_SUITE_P(EscapesRoot, CanonicalError,
                         ::testing::Values(ErrCase{"/../x", PathError::kEscapesRoot},
                                           ErrCase{"/..", PathError::kEscapesRoot},
                                           ErrCase{"/../", PathError::kEscapesRoot},
                                           ErrCase{"/./../x", PathError::kEscapesRoot},
                                           ErrCase{"//../x", PathError::kEscapesRoot},
                                           ErrCase{"/a/../..", PathError::kEscapesRoot},
                                           ErrCase{"/a/b/../../../c", PathError::kEscapesRoot},
                                           ErrCase{"/a/%2e%2e/%2e%2e/x", PathError::kEscapesRoot},
                                           ErrCase{"/%2e%2e", PathError::kEscapesRoot},
                                           ErrCase{"/.%2E/etc/passwd", PathError::kEscapesRoot}));

INSTANTIATE_TEST_SUITE_P(EncodedSlash, CanonicalError,
                         ::testing::Values(ErrCase{"/objects/%2Fa", PathError::kEncodedSlash},
                                           ErrCase{"/objects/%2fa", PathError::kEncodedSlash},
                                           ErrCase{"/objects/a%5Cb", PathError::kEncodedSlash},
                                           ErrCase{"/objects/a%5cb", PathError::kEncodedSlash},
                                           ErrCase{"/%2F", PathError::kEncodedSlash},
                                           ErrCase{"/..%2F..%2Fetc", PathError::kEncodedSlash}));

INSTANTIATE_TEST_SUITE_P(Nul, CanonicalError,
                         ::testing::Values(ErrCase{"/a%00", PathError::kNul},
                                           ErrCase{"/a%00b", PathError::kNul},
                                           ErrCase{"/a\0b"s, PathError::kNul},
                                           ErrCase{"/\0"s, PathError::kNul},
                                           ErrCase{"/a?x\0"s, PathError::kNul}));

INSTANTIATE_TEST_SUITE_P(BadEncoding, CanonicalError,
                         ::testing::Values(ErrCase{"/a%", PathError::kBadEncoding},
                                           ErrCase{"/a%4", PathError::kBadEncoding},
                                           ErrCase{"/a%4?x", PathError::kBadEncoding},
                                           ErrCase{"/a%zz", PathError::kBadEncoding},
                                           ErrCase{"/a%4g", PathError::kBadEncoding},
                                           ErrCase{"/a%g4", PathError::kBadEncoding},
                                           ErrCase{"/a%%41", PathError::kBadEncoding},
                                           ErrCase{"/a%/b", PathError::kBadEncoding},
                                           ErrCase{"/a% 1", PathError::kBadEncoding}));

INSTANTIATE_TEST_SUITE_P(
    BadCharacter, CanonicalError,
    ::testing::Values(
        ErrCase{"/a b", PathError::kBadCharacter}, ErrCase{"/a\tb", PathError::kBadCharacter},
        ErrCase{"/a\r\nb", PathError::kBadCharacter}, ErrCase{"/a\x01", PathError::kBadCharacter},
        ErrCase{"/a\x1f", PathError::kBadCharacter}, ErrCase{"/a\x7f", PathError::kBadCharacter},
        ErrCase{"/a\\b", PathError::kBadCharacter}, ErrCase{"/a\"b", PathError::kBadCharacter},
        ErrCase{"/a<b", PathError::kBadCharacter}, ErrCase{"/a>b", PathError::kBadCharacter},
        ErrCase{"/a`b", PathError::kBadCharacter}, ErrCase{"/a{b", PathError::kBadCharacter},
        ErrCase{"/a}b", PathError::kBadCharacter}, ErrCase{"/a|b", PathError::kBadCharacter},
        ErrCase{"/a^b", PathError::kBadCharacter}, ErrCase{"/a#b", PathError::kBadCharacter},
        ErrCase{"/a[b]", PathError::kBadCharacter}, ErrCase{"/a\x80", PathError::kBadCharacter},
        ErrCase{"/a\xff", PathError::kBadCharacter},
        ErrCase{"/caf\xC3\xA9", PathError::kBadCharacter},
        // The query is forwarded raw into the request line: no controls or spaces.
        ErrCase{"/a?b c", PathError::kBadCharacter},
        ErrCase{"/a?b\r\nX: y", PathError::kBadCharacter},
        ErrCase{"/a?\x7f", PathError::kBadCharacter}));

TEST(CanonicalTarget, OutputUntouchedOnError) {
  CanonicalTarget out{"/before", "q", true};
  EXPECT_EQ(CanonicalizeTarget("/a/%2F", &out), PathError::kEncodedSlash);
  EXPECT_EQ(out.path, "/before");
  EXPECT_EQ(out.query, "q");
  EXPECT_TRUE(out.has_query);
}

TEST(CanonicalTarget, ReusedOutputIsOverwritten) {
  CanonicalTarget out;
  ASSERT_EQ(CanonicalizeTarget("/a?x=1", &out), PathError::kNone);
  ASSERT_EQ(CanonicalizeTarget("/b", &out), PathError::kNone);
  EXPECT_EQ(out.path, "/b");
  EXPECT_EQ(out.query, "");
  EXPECT_FALSE(out.has_query);
}

TEST(CanonicalTarget, ErrorMessagesAreDistinct) {
  const std::vector<PathError> errors = {PathError::kNotOriginForm, PathError::kEscapesRoot,
                                         PathError::kEncodedSlash,  PathError::kNul,
                                         PathError::kBadEncoding,   PathError::kBadCharacter};
  std::set<std::string> seen;
  for (PathError e : errors) {
    const std::string msg = PathErrorMessage(e);
    EXPECT_FALSE(msg.empty());
    EXPECT_TRUE(seen.insert(msg).second) << "duplicate message: " << msg;
  }
}

// Reference model, written the slow and obvious way: decode each segment
// (only valid, non-slash, non-NUL escapes are generated below), then apply
// dot segments with a stack. Returns false when ".." leaves the root.
bool ReferenceCanonical(const std::string& target, std::string* out) {
  std::vector<std::string> raw_segments;
  size_t start = 1;
  while (true) {
    const size_t slash = target.find('/', start);
    raw_segments.push_back(target.substr(start, slash - start));
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  std::vector<std::string> stack;
  bool trailing_slash = false;
  for (const std::string& raw : raw_segments) {
    std::string seg;
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] != '%') {
        seg += raw[i];
        continue;
      }
      const int v = std::stoi(raw.substr(i + 1, 2), nullptr, 16);
      const bool unreserved = std::isalnum(v) || v == '-' || v == '.' || v == '_' || v == '~';
      if (unreserved) {
        seg += static_cast<char>(v);
      } else {
        seg += '%';
        for (char h : raw.substr(i + 1, 2)) seg += static_cast<char>(std::toupper(h));
      }
      i += 2;
    }
    trailing_slash = true;
    if (seg.empty() || seg == ".") continue;
    if (seg == "..") {
      if (stack.empty()) return false;
      stack.pop_back();
      continue;
    }
    stack.push_back(seg);
    trailing_slash = false;
  }
  *out = "/";
  for (size_t i = 0; i < stack.size(); ++i) {
    *out += stack[i];
    if (i + 1 < stack.size() || trailing_slash) *out += '/';
  }
  return true;
}

// Random paths built from the pieces that interact: slashes, dots, encoded
// dots, unreserved and reserved escapes. Compares against the reference and
// checks that canonicalization is idempotent.
TEST(CanonicalTarget, MatchesReferenceOnRandomPaths) {
  const std::vector<std::string> pieces = {"/", "/", "/",   ".",   ".",   "..",  "%2e", "%2E",
                                           "a", "b", "%41", "%7e", "%20", "%c3", "~",   ";"};
  std::mt19937 rng(20240601);
  std::uniform_int_distribution<size_t> pick(0, pieces.size() - 1);
  std::uniform_int_distribution<int> len(0, 12);
  int ok = 0, escapes = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    std::string target = "/";
    for (int n = len(rng); n > 0; --n) target += pieces[pick(rng)];
    std::string expected;
    const bool ref_ok = ReferenceCanonical(target, &expected);
    CanonicalTarget out;
    const PathError e = CanonicalizeTarget(target, &out);
    if (!ref_ok) {
      EXPECT_EQ(e, PathError::kEscapesRoot) << target;
      ++escapes;
      continue;
    }
    ASSERT_EQ(e, PathError::kNone) << target;
    EXPECT_EQ(out.path, expected) << target;
    CanonicalTarget again;
    ASSERT_EQ(CanonicalizeTarget(out.path, &again), PathError::kNone) << out.path;
    EXPECT_EQ(again.path, out.path) << "not idempotent for " << target;
    ++ok;
  }
  // Both outcomes must be exercised, or the comparison proves little.
  EXPECT_GT(ok, 1000);
  EXPECT_GT(escapes, 500);
}

// Most paths are canonical already, and CanonicalizeTarget copies them
// without the segment walk: whatever the target, the two give the same
// answer. Targets whose path is kept as it came (the shortcut's, and a few
// walked ones such as "%C3") and targets whose path changes both occur.
TEST(CanonicalPath, ShortcutAgreesWithTheWalk) {
  const std::vector<std::string> pieces = {"/", "a", "Zz9", ".", "..", "%2e", "%41", "%2F",
                                           "%c3", "%", "!", "~", "?", "q=1", " ", "\0"s};
  std::mt19937 rng(20261203);
  std::uniform_int_distribution<size_t> pick(0, pieces.size() - 1);
  std::uniform_int_distribution<int> len(0, 10);
  int unchanged = 0, changed = 0;
  for (int iter = 0; iter < 50000; ++iter) {
    std::string target = "/";
    for (int n = len(rng); n > 0; --n) target += pieces[pick(rng)];
    CanonicalTarget fast, walk;
    fast.path = "left over from an earlier request";
    fast.query = "old=1";
    const PathError e = CanonicalizeTarget(target, &fast);
    ASSERT_EQ(e, detail::CanonicalizeTargetWalk(target, &walk)) << target;
    if (e != PathError::kNone) continue;
    EXPECT_EQ(fast.path, walk.path) << target;
    EXPECT_EQ(fast.query, walk.query) << target;
    EXPECT_EQ(fast.has_query, walk.has_query) << target;
    const std::string_view raw = std::string_view(target).substr(0, target.find('?'));
    ++(fast.path == raw ? unchanged : changed);
  }
  EXPECT_GT(unchanged, 1000);
  EXPECT_GT(changed, 1000);
}

}  // namespace
}  // namespace fencegate::proxy
