// Key template validation (docs/contract.md, "Keys and canonical paths"),
// directly and through Load().

#include <gtest/gtest.h>

#include "config/internal.h"
#include "test_util.h"

namespace fencegate::config {
namespace {

using internal::ValidateKeyTemplate;
using testing::FailsAt;
using testing::MustLoad;

TEST(KeyTemplateTest, AcceptsPlaceholdersAndLiterals) {
  EXPECT_EQ(ValidateKeyTemplate("{path}", 0, false), "");
  EXPECT_EQ(ValidateKeyTemplate("static-key", 0, false), "");
  EXPECT_EQ(ValidateKeyTemplate("tenant:{header:X-Tenant}:{path}", 0, false), "");
  EXPECT_EQ(ValidateKeyTemplate("{1}", 1, true), "");
  EXPECT_EQ(ValidateKeyTemplate("{1}/{2}/{9}", 9, true), "");
  EXPECT_EQ(ValidateKeyTemplate("t/{1}{path}{header:a}", 3, true), "");
}

TEST(KeyTemplateTest, RejectsMalformedTemplates) {
  struct BadCase {
    const char* key;
    unsigned captures;
    bool regex;
    const char* fragment;
  };
  const BadCase cases[] = {
      {"", 0, false, "empty"},
      {"{path", 0, false, "unbalanced '{'"},
      {"{pa{th}", 0, false, "unbalanced '{'"},
      {"path}", 0, false, "unbalanced '}'"},
      {"{}", 0, false, "unknown placeholder {}"},
      {"{host}", 0, false, "unknown placeholder {host}"},
      {"{PATH}", 0, false, "unknown placeholder {PATH}"},
      {"{0}", 3, true, "unknown placeholder {0}"},
      {"{10}", 10, true, "unknown placeholder {10}"},
      {"{header:}", 0, false, "invalid header name"},
      {"{header:X Tenant}", 0, false, "invalid header name"},
      {"{header:X:Y}", 0, false, "invalid header name"},
      {"{1}", 0, false, "path_prefix"},
      {"{2}", 1, true, "only 1 capture group"},
      {"{1}", 0, true, "only 0 capture group"},
      {"a\tb", 0, false, "control character"},
  };
  for (const BadCase& c : cases) {
    std::string problem = ValidateKeyTemplate(c.key, c.captures, c.regex);
    EXPECT_NE(problem.find(c.fragment), std::string::npos)
        << "key \"" << c.key << "\" gave \"" << problem << "\"";
  }
}

TEST(KeyTemplateTest, LoadReportsCaptureBeyondRegexGroups) {
  std::string yaml = std::string(testing::kUpstream) +
                     "routes:\n"
                     "  - path_regex: \"^/tenants/([^/]+)/\"\n"
                     "    key: \"{1}/{2}\"\n";
  EXPECT_TRUE(FailsAt(yaml, 4, "routes[0].key", "{2}"));
}

TEST(KeyTemplateTest, LoadReportsCaptureOnPrefixRoute) {
  std::string yaml = std::string(testing::kUpstream) +
                     "routes:\n"
                     "  - path_prefix: /objects/\n"
                     "  - path_prefix: /buckets/\n"
                     "    mode: shadow\n"
                     "    key: \"{1}\"\n";
  EXPECT_TRUE(FailsAt(yaml, 6, "routes[1].key", "path_prefix"));
}

TEST(KeyTemplateTest, LoadReportsUnknownPlaceholderAndUnbalancedBrace) {
  std::string base = std::string(testing::kUpstream) + "routes:\n  - path_prefix: /\n";
  EXPECT_TRUE(FailsAt(base + "    key: \"{query}\"\n", 4, "routes[0].key", "unknown placeholder"));
  EXPECT_TRUE(FailsAt(base + "    key: \"x{path\"\n", 4, "routes[0].key", "unbalanced"));
  EXPECT_TRUE(FailsAt(base + "    key: \"\"\n", 4, "routes[0].key", "empty"));
}

TEST(KeyTemplateTest, LoadReportsKeyBeforeRegexAgainstTheRegex) {
  // The key comes first in the mapping; it is still checked against the regex.
  std::string yaml = std::string(testing::kUpstream) +
                     "routes:\n"
                     "  - key: \"{3}\"\n"
                     "    path_regex: \"^/a/(b)/(c)\"\n";
  EXPECT_TRUE(FailsAt(yaml, 3, "routes[0].key", "only 2 capture group"));
}

TEST(KeyTemplateTest, LoadKeepsValidTemplates) {
  Config config = MustLoad(std::string(testing::kUpstream) +
                           "routes:\n"
                           "  - path_regex: \"^/t/([^/]+)/(?:x)/([0-9]+)\"\n"
                           "    key: \"{1}-{2}-{header:X-Tenant}\"\n");
  ASSERT_EQ(config.routes.size(), 1u);
  EXPECT_EQ(config.routes[0].key, "{1}-{2}-{header:X-Tenant}");
}

}  // namespace
}  // namespace fencegate::config
