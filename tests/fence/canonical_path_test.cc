#include "fence/canonical_path.h"

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
    Contract, CanonicalOk,
    ::testing::Values(
        // The contract's examples.
        OkCase{"//objects//a", "/objects/a", "", false},
        OkCase{"/objects/./a", "/objects/a", "", false},
        OkCase{"/objects/x/../a", "/objects/a", "", false},
        OkCase{"/objects/%61", "/objects/a", "", false}, OkCase{"/a?b=%2F", "/a", "b=%2F", true},
        // Plain paths stay as they are.
        OkCase{"/", "/", "", false}, OkCase{"/objects/a", "/objects/a", "", false},
        OkCase{"/a/b/c.txt", "/a/b/c.txt", "", false},
        // Slash runs merge; a trailing slash is not part of the path.
        OkCase{"//", "/", "", false}, OkCase{"///a///b///", "/a/b", "", false},
        OkCase{"/a/b/", "/a/b", "", false}, OkCase{"/a//", "/a", "", false},
        // Dot segments.
        OkCase{"/.", "/", "", false}, OkCase{"/./", "/", "", false},
        OkCase{"/./a", "/a", "", false}, OkCase{"/a/.", "/a", "", false},
        OkCase{"/a/..", "/", "", false}, OkCase{"/a/b/..", "/a", "", false},
        OkCase{"/a/b/../", "/a", "", false}, OkCase{"/a/b/../../c", "/c", "", false},
        OkCase{"/a/./b/./../c/", "/a/c", "", false}, OkCase{"/a//..//b", "/b", "", false},
        OkCase{"/a/b/c/../../../", "/", "", false},
        // Only exact "." and ".." are dot segments.
        OkCase{"/a/...", "/a/...", "", false}, OkCase{"/a/..b", "/a/..b", "", false},
        OkCase{"/a/b..", "/a/b..", "", false}, OkCase{"/a/.b/", "/a/.b", "", false},
        OkCase{"/a/.b;c", "/a/.b;c", "", false},
        // Dot segments count after decoding.
        OkCase{"/a/%2e%2e/b", "/b", "", false}, OkCase{"/a/%2E%2E/b", "/b", "", false},
        OkCase{"/a/.%2e/b", "/b", "", false}, OkCase{"/a/%2e./b", "/b", "", false},
        OkCase{"/a/%2e/b", "/a/b", "", false}, OkCase{"/a/%2e", "/a", "", false},
        // Every escape is decoded, in either case: reserved characters too.
        OkCase{"/%41%5a%61%7A%30%39%2D%2e%5F%7e", "/AZaz09-._~", "", false},
        OkCase{"/a%20b", "/a b", "", false}, OkCase{"/caf%c3%a9", "/caf\xC3\xA9", "", false},
        OkCase{"/caf%C3%A9", "/caf\xC3\xA9", "", false}, OkCase{"/a%3fb", "/a?b", "", false},
        OkCase{"/a%25", "/a%", "", false}, OkCase{"/a%2b%2B+", "/a+++", "", false},
        OkCase{"/%7b%7d", "/{}", "", false}, OkCase{"/x%3a%40", "/x:@", "", false},
        OkCase{"/rep%3A1", "/rep:1", "", false}, OkCase{"/a%3B", "/a;", "", false},
        OkCase{"/a%0Ab", "/a\nb", "", false},
        // Raw sub-delims, ':' and '@' are allowed and kept.
        OkCase{"/!$&'()*+,;=:@", "/!$&'()*+,;=:@", "", false},
        OkCase{"/a-b_c.d~e", "/a-b_c.d~e", "", false},
        // Query: split at the first '?', kept raw, never canonicalized.
        OkCase{"/a?", "/a", "", true}, OkCase{"/?x", "/", "x", true},
        OkCase{"/a?b?c", "/a", "b?c", true}, OkCase{"/a/../b?x=../y//z", "/b", "x=../y//z", true},
        OkCase{"/a?%zz%00%2f", "/a", "%zz%00%2f", true},
        OkCase{"/a?q=\xC3\xA9&r=<>", "/a", "q=\xC3\xA9&r=<>", true},
        OkCase{"/%61?%61", "/a", "%61", true}));

struct ForwardCase {
  std::string target;
  std::string forward;
  bool trailing_slash;
};

void PrintTo(const ForwardCase& c, std::ostream* os) { *os << '"' << c.target << '"'; }

class CanonicalForward : public ::testing::TestWithParam<ForwardCase> {};

// The backend receives one spelling per resource: pchar bytes raw, every
// other byte escaped with upper-case hex, the trailing slash kept.
TEST_P(CanonicalForward, ForwardsOneSpelling) {
  const ForwardCase& c = GetParam();
  CanonicalTarget out;
  ASSERT_EQ(CanonicalizeTarget(c.target, &out), PathError::kNone) << c.target;
  EXPECT_EQ(out.forward, c.forward) << c.target;
  EXPECT_EQ(out.trailing_slash, c.trailing_slash) << c.target;
}

INSTANTIATE_TEST_SUITE_P(
    Rule, CanonicalForward,
    ::testing::Values(ForwardCase{"/objects/rep:1", "/objects/rep:1", false},
                      ForwardCase{"/objects/rep%3A1", "/objects/rep:1", false},
                      ForwardCase{"/objects/rep%3a1", "/objects/rep:1", false},
                      ForwardCase{"/a%40b%2B", "/a@b+", false},
                      ForwardCase{"/a%20b", "/a%20b", false},
                      ForwardCase{"/caf%c3%a9", "/caf%C3%A9", false},
                      ForwardCase{"/a%25", "/a%25", false},
                      ForwardCase{"/a%3f%23", "/a%3F%23", false},
                      ForwardCase{"/%7b%7D", "/%7B%7D", false},
                      ForwardCase{"/objects/t1/", "/objects/t1/", true},
                      ForwardCase{"/objects/t1//", "/objects/t1/", true},
                      ForwardCase{"/objects/t1/.", "/objects/t1/", true},
                      ForwardCase{"/objects/t1/x/..", "/objects/t1/", true},
                      ForwardCase{"/", "/", false}, ForwardCase{"//", "/", false},
                      ForwardCase{"/a/..", "/", false}));

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

// Servlet containers strip ";..." from a segment before resolving it, so
// "..;" is ".." there.
INSTANTIATE_TEST_SUITE_P(DotParameters, CanonicalError,
                         ::testing::Values(ErrCase{"/x/..;/objects/k", PathError::kDotParameters},
                                           ErrCase{"/objects/zz/..;/k", PathError::kDotParameters},
                                           ErrCase{"/a/.;x/b", PathError::kDotParameters},
                                           ErrCase{"/a/..;x=1", PathError::kDotParameters},
                                           ErrCase{"/a/%2e%2e;/b", PathError::kDotParameters},
                                           ErrCase{"/a/..%3B/b", PathError::kDotParameters},
                                           ErrCase{"/..;", PathError::kDotParameters}));

// Overlong forms, surrogates, stray continuation bytes, code points above
// U+10FFFF and sequences cut short.
INSTANTIATE_TEST_SUITE_P(BadUtf8, CanonicalError,
                         ::testing::Values(ErrCase{"/a%C0%AF", PathError::kBadUtf8},
                                           ErrCase{"/a%c0%ae%c0%ae/x", PathError::kBadUtf8},
                                           ErrCase{"/%C1%81", PathError::kBadUtf8},
                                           ErrCase{"/%E0%80%AF", PathError::kBadUtf8},
                                           ErrCase{"/%F0%80%80%AF", PathError::kBadUtf8},
                                           ErrCase{"/%ED%A0%80", PathError::kBadUtf8},
                                           ErrCase{"/%F4%90%80%80", PathError::kBadUtf8},
                                           ErrCase{"/%F5%80%80%80", PathError::kBadUtf8},
                                           ErrCase{"/%80", PathError::kBadUtf8},
                                           ErrCase{"/%C3", PathError::kBadUtf8},
                                           ErrCase{"/%E2%82", PathError::kBadUtf8},
                                           ErrCase{"/%C3/a", PathError::kBadUtf8},
                                           ErrCase{"/%FF", PathError::kBadUtf8}));

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

TEST(CanonicalTarget, ValidUtf8IsDecoded) {
  CanonicalTarget out;
  // Two-, three- and four-byte forms at their edges.
  ASSERT_EQ(CanonicalizeTarget("/%C2%80%DF%BF%E0%A0%80%EF%BF%BF%F0%90%80%80%F4%8F%BF%BF", &out),
            PathError::kNone);
  EXPECT_EQ(out.path, "/\xC2\x80\xDF\xBF\xE0\xA0\x80\xEF\xBF\xBF\xF0\x90\x80\x80\xF4\x8F\xBF\xBF");
}

TEST(CanonicalTarget, OutputUntouchedOnError) {
  CanonicalTarget out{"/before", "/before/", "q", true, true};
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
  const std::vector<PathError> errors = {
      PathError::kNotOriginForm, PathError::kEscapesRoot,   PathError::kEncodedSlash,
      PathError::kNul,           PathError::kBadEncoding,   PathError::kBadCharacter,
      PathError::kBadUtf8,       PathError::kDotParameters, PathError::kBadDestination};
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
  for (const std::string& raw : raw_segments) {
    std::string seg;
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] != '%') {
        seg += raw[i];
        continue;
      }
      seg += static_cast<char>(std::stoi(raw.substr(i + 1, 2), nullptr, 16));
      i += 2;
    }
    if (seg.empty() || seg == ".") continue;
    if (seg == "..") {
      if (stack.empty()) return false;
      stack.pop_back();
      continue;
    }
    stack.push_back(seg);
  }
  *out = "/";
  for (size_t i = 0; i < stack.size(); ++i) {
    *out += stack[i];
    if (i + 1 < stack.size()) *out += '/';
  }
  return true;
}

// Random paths built from the pieces that interact: slashes, dots, encoded
// dots, unreserved and reserved escapes. Compares against the reference and
// checks that canonicalization is idempotent.
TEST(CanonicalTarget, MatchesReferenceOnRandomPaths) {
  const std::vector<std::string> pieces = {"/", "/", "/",   ".",   ".",   "..",  "%2e", "%2E",
                                           "a", "b", "%41", "%7e", "%20", "%3a", "~",   "+"};
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
    ASSERT_EQ(CanonicalizeTarget(out.forward, &again), PathError::kNone) << out.forward;
    EXPECT_EQ(again.path, out.path) << "not idempotent for " << target;
    EXPECT_EQ(again.forward, out.forward) << "not idempotent for " << target;
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
    EXPECT_EQ(fast.forward, walk.forward) << target;
    EXPECT_EQ(fast.trailing_slash, walk.trailing_slash) << target;
    EXPECT_EQ(fast.query, walk.query) << target;
    EXPECT_EQ(fast.has_query, walk.has_query) << target;
    const std::string_view raw = std::string_view(target).substr(0, target.find('?'));
    ++(fast.forward == raw ? unchanged : changed);
  }
  EXPECT_GT(unchanged, 1000);
  EXPECT_GT(changed, 1000);
}

// Percent-decodes `s` (valid escapes only, as CanonicalTarget::forward has).
std::string Decode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%') {
      out += static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

// One resource, many spellings: random segments (reserved and unreserved
// ASCII, UTF-8 letters), each spelt with random escapes in random hex case,
// extra slashes, "." segments, detours through ".." and a trailing slash.
// Every spelling must give one canonical path, and what is forwarded must
// decode to that path: same decoded resource, same key; the backend gets
// what was fenced.
TEST(CanonicalTarget, EverySpellingOfAResourceIsOneKey) {
  std::mt19937 rng(20261205);
  auto coin = [&rng](int percent) {
    return std::uniform_int_distribution<int>(0, 99)(rng) < percent;
  };
  const std::string ascii =
      "abcXYZ019-._~!$&'()*+,=:@ \"<>[]^`{|}#?%";  // no '/', '\\', ';' or NUL
  const std::vector<std::string> letters = {"\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x94\x92"};
  auto random_segment = [&] {
    std::string seg;
    const int n = std::uniform_int_distribution<int>(1, 6)(rng);
    for (int i = 0; i < n; ++i) {
      if (coin(15)) {
        seg += letters[std::uniform_int_distribution<size_t>(0, letters.size() - 1)(rng)];
      } else {
        seg += ascii[std::uniform_int_distribution<size_t>(0, ascii.size() - 1)(rng)];
      }
    }
    if (seg == "." || seg == "..") seg += "x";
    return seg;
  };
  auto spell_byte = [&](unsigned char b, std::string* out) {
    static const char* kHex = "0123456789ABCDEF";
    static const char* kLowHex = "0123456789abcdef";
    const bool pchar = std::isalnum(b) || std::string_view("-._~!$&'()*+,=:@").find(
                                              static_cast<char>(b)) != std::string_view::npos;
    if (pchar && b < 0x80 && coin(70)) {
      *out += static_cast<char>(b);
      return;
    }
    const char* hex = coin(50) ? kHex : kLowHex;
    *out += '%';
    *out += (coin(50) ? kHex : hex)[b >> 4];
    *out += (coin(50) ? kLowHex : hex)[b & 15];
  };
  auto spell_dot = [&](std::string* out) { coin(50) ? *out += "." : *out += (coin(50) ? "%2e" : "%2E"); };

  int spellings = 0;
  for (int iter = 0; iter < 2000; ++iter) {
    std::vector<std::string> segments(std::uniform_int_distribution<size_t>(1, 4)(rng));
    for (std::string& seg : segments) seg = random_segment();
    std::string resource;
    for (const std::string& seg : segments) resource += "/" + seg;

    std::string first_path;
    for (int variant = 0; variant < 8; ++variant) {
      std::string target;
      for (const std::string& seg : segments) {
        target += coin(20) ? "//" : "/";
        if (coin(15)) {
          target += "./";  // a "." segment
        }
        if (coin(15)) {  // a detour: "x/../"
          for (unsigned char b : random_segment()) spell_byte(b, &target);
          target += "/";
          spell_dot(&target);
          spell_dot(&target);
          target += "/";
        }
        for (unsigned char b : seg) spell_byte(b, &target);
      }
      if (coin(30)) target += "/";
      CanonicalTarget out;
      ASSERT_EQ(CanonicalizeTarget(target, &out), PathError::kNone) << target;
      EXPECT_EQ(out.path, resource) << target;
      EXPECT_EQ(Decode(out.forward), out.trailing_slash ? resource + "/" : resource) << target;
      if (variant == 0) first_path = out.path;
      EXPECT_EQ(out.path, first_path) << target;
      ++spellings;
    }
  }
  EXPECT_EQ(spellings, 16000);
}

}  // namespace
}  // namespace fencegate::proxy
