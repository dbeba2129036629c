#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "fence/router.h"

namespace fencegate::proxy {
namespace {

using ExpandError = KeyTemplate::ExpandError;
using namespace std::string_literals;

KeyTemplate MustCompile(std::string_view text) {
  std::string error;
  std::optional<KeyTemplate> t = KeyTemplate::Compile(text, &error);
  EXPECT_TRUE(t.has_value()) << text << ": " << error;
  return t.value_or(KeyTemplate{});
}

// A header map with case-insensitive lookup, as the session provides.
KeyTemplate::HeaderLookup Headers(std::map<std::string, std::string> h) {
  return [h = std::move(h)](std::string_view name) -> std::optional<std::string_view> {
    for (const auto& [k, v] : h) {
      if (k.size() == name.size() &&
          std::equal(k.begin(), k.end(), name.begin(), [](char a, char b) {
            return std::tolower(static_cast<unsigned char>(a)) ==
                   std::tolower(static_cast<unsigned char>(b));
          })) {
        return std::string_view(v);
      }
    }
    return std::nullopt;
  };
}

struct ExpandCase {
  std::string tmpl;
  std::string path;
  std::vector<std::string> captures;
  std::map<std::string, std::string> headers;
  ExpandError error;
  std::string key;  // when error == kNone
};

void PrintTo(const ExpandCase& c, std::ostream* os) {
  *os << "template \"" << c.tmpl << "\" path \"" << c.path.substr(0, 40) << "\"";
}

class KeyExpand : public ::testing::TestWithParam<ExpandCase> {};

TEST_P(KeyExpand, Expands) {
  const ExpandCase& c = GetParam();
  const KeyTemplate t = MustCompile(c.tmpl);
  std::string key = "garbage from an earlier request";
  const ExpandError e = t.Expand(c.path, c.captures, Headers(c.headers), &key);
  ASSERT_EQ(e, c.error);
  if (e == ExpandError::kNone) {
    EXPECT_EQ(key, c.key);
  }
}

const std::string k1024(1024, 'k');

INSTANTIATE_TEST_SUITE_P(
    Contract, KeyExpand,
    ::testing::Values(
        ExpandCase{"{path}", "/objects/a", {}, {}, ExpandError::kNone, "/objects/a"},
        ExpandCase{"{1}", "/t/acme/x", {"/t/acme/", "acme"}, {}, ExpandError::kNone, "acme"},
        ExpandCase{"{2}:{1}", "/", {"/", "a", "b"}, {}, ExpandError::kNone, "b:a"},
        ExpandCase{"{1}{1}", "/", {"/", "ab"}, {}, ExpandError::kNone, "abab"},
        ExpandCase{
            "{header:X-Tenant}", "/a", {}, {{"X-Tenant", "acme"}}, ExpandError::kNone, "acme"},
        // The lookup is the session's, case-insensitive.
        ExpandCase{
            "{header:X-Tenant}", "/a", {}, {{"x-tenant", "acme"}}, ExpandError::kNone, "acme"},
        ExpandCase{"tenants/{header:X-Tenant}{path}",
                   "/objects/a",
                   {},
                   {{"X-Tenant", "acme"}},
                   ExpandError::kNone,
                   "tenants/acme/objects/a"},
        ExpandCase{"/static/key", "/anything", {}, {}, ExpandError::kNone, "/static/key"},
        ExpandCase{"a/{path}/b", "/x/", {}, {}, ExpandError::kNone, "a//x//b"},
        ExpandCase{"k:{1}/{path}", "/p", {"/p", "v"}, {}, ExpandError::kNone, "k:v//p"},
        // A capture that did not participate, or is beyond the match, is "".
        ExpandCase{"x{1}y", "/", {"/", ""}, {}, ExpandError::kNone, "xy"},
        ExpandCase{"x{3}y", "/", {"/", "a"}, {}, ExpandError::kNone, "xy"},
        // Header values may carry non-ASCII bytes (obs-text).
        ExpandCase{
            "{header:X-T}", "/", {}, {{"X-T", "caf\xC3\xA9"}}, ExpandError::kNone, "caf\xC3\xA9"},
        // Missing or empty referenced header.
        ExpandCase{"{header:X-Tenant}{path}", "/a", {}, {}, ExpandError::kMissingHeader, ""},
        ExpandCase{"{header:X-Tenant}{path}",
                   "/a",
                   {},
                   {{"X-Other", "v"}},
                   ExpandError::kMissingHeader,
                   ""},
        ExpandCase{"{header:X-Tenant}{path}",
                   "/a",
                   {},
                   {{"X-Tenant", ""}},
                   ExpandError::kMissingHeader,
                   ""},
        // Empty key.
        ExpandCase{"{1}", "/a", {"/a", ""}, {}, ExpandError::kEmpty, ""},
        ExpandCase{"{1}", "/a", {}, {}, ExpandError::kEmpty, ""},
        ExpandCase{"{path}", "", {}, {}, ExpandError::kEmpty, ""},
        // Length: 1024 bytes is fine, 1025 is not.
        ExpandCase{"{path}", k1024, {}, {}, ExpandError::kNone, k1024},
        ExpandCase{"{path}", k1024 + "k", {}, {}, ExpandError::kTooLong, ""},
        ExpandCase{"x{path}", k1024, {}, {}, ExpandError::kTooLong, ""},
        ExpandCase{
            "{header:H}", "/", {}, {{"H", std::string(5000, 'h')}}, ExpandError::kTooLong, ""},
        // Control bytes and NUL.
        ExpandCase{"{header:H}",
                   "/",
                   {},
                   {{"H",
                     "a\x01"
                     "b"}},
                   ExpandError::kBadByte,
                   ""},
        ExpandCase{"{header:H}", "/", {}, {{"H", "a\tb"}}, ExpandError::kBadByte, ""},
        ExpandCase{"{header:H}", "/", {}, {{"H", "a\x7f"}}, ExpandError::kBadByte, ""},
        ExpandCase{"{header:H}", "/", {}, {{"H", "a\0b"s}}, ExpandError::kBadByte, ""},
        ExpandCase{"{1}", "/", {"/", "a\nb"}, {}, ExpandError::kBadByte, ""}));

TEST(KeyTemplate, HeaderNameIsPassedAsWritten) {
  const KeyTemplate t = MustCompile("{header:X-Tenant}");
  std::vector<std::string> asked;
  std::string key;
  const ExpandError e = t.Expand(
      "/a", {},
      [&asked](std::string_view name) -> std::optional<std::string_view> {
        asked.emplace_back(name);
        return "t1";
      },
      &key);
  EXPECT_EQ(e, ExpandError::kNone);
  EXPECT_EQ(key, "t1");
  EXPECT_EQ(asked, std::vector<std::string>{"X-Tenant"});
}

TEST(KeyTemplate, NullLookupMeansNoHeaders) {
  std::string key;
  EXPECT_EQ(MustCompile("{header:X}").Expand("/a", {}, nullptr, &key), ExpandError::kMissingHeader);
  EXPECT_EQ(MustCompile("{path}").Expand("/a", {}, nullptr, &key), ExpandError::kNone);
  EXPECT_EQ(key, "/a");
}

TEST(KeyTemplate, MaxCapture) {
  EXPECT_EQ(MustCompile("{path}").max_capture(), 0);
  EXPECT_EQ(MustCompile("literal").max_capture(), 0);
  EXPECT_EQ(MustCompile("{1}").max_capture(), 1);
  EXPECT_EQ(MustCompile("{3}/{1}").max_capture(), 3);
  EXPECT_EQ(MustCompile("{9}").max_capture(), 9);
}

class KeyCompileError : public ::testing::TestWithParam<std::string> {};

TEST_P(KeyCompileError, IsRefused) {
  std::string error;
  EXPECT_FALSE(KeyTemplate::Compile(GetParam(), &error).has_value());
  EXPECT_NE(error, "");
}

INSTANTIATE_TEST_SUITE_P(Contract, KeyCompileError,
                         ::testing::Values("", "{", "{path", "}", "a}b", "{}", "{0}", "{10}",
                                           "{-1}", "{Path}", "{PATH}", "{pathx}", "{ path}",
                                           "{header:}", "{header}", "{header:X Tenant}",
                                           "{header:X:Y}", "{header:X/Y}", "{Header:X}", "{{path}}",
                                           "{path}}", "a\nb", "a\0b"s, "{query}"));

TEST(KeyTemplate, CompileErrorNamesThePlaceholder) {
  std::string error;
  ASSERT_FALSE(KeyTemplate::Compile("x/{pth}", &error).has_value());
  EXPECT_NE(error.find("{pth}"), std::string::npos) << error;
}

}  // namespace
}  // namespace fencegate::proxy
