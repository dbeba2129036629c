// routes[i]: matching, methods, mode, names and lines (idempotency:
// idempotency_test.cc).

#include <gtest/gtest.h>

#include "test_util.h"

namespace fencegate::config {
namespace {

using testing::FailsAt;
using testing::kUpstream;
using testing::MustLoad;

// Line 1 upstream, line 2 "routes:", the given route lines from line 3.
std::string Routes(std::string_view routes) {
  return std::string(kUpstream) + "routes:\n" + std::string(routes);
}

TEST(RoutesTest, DefaultsOfAPrefixRoute) {
  Config c = MustLoad(Routes("  - path_prefix: /objects/\n"));
  ASSERT_EQ(c.routes.size(), 1u);
  const RouteConfig& r = c.routes[0];
  EXPECT_EQ(r.name, "route-0");
  EXPECT_EQ(r.path_prefix, "/objects/");
  EXPECT_EQ(r.path_regex, "");
  EXPECT_TRUE(r.methods.empty());  // every method but GET, HEAD, OPTIONS, TRACE
  EXPECT_EQ(r.key, "{path}");
  EXPECT_EQ(r.mode, RouteMode::kEnforce);
  EXPECT_FALSE(r.keep_path_params);
  EXPECT_FALSE(r.case_insensitive);
  EXPECT_EQ(r.idempotency, std::nullopt);
  EXPECT_EQ(r.line, 3);
}

TEST(RoutesTest, NamesDefaultByIndexAndLinesAreRecorded) {
  Config c =
      MustLoad(Routes("  - name: first\n"
                      "    path_prefix: /a\n"
                      "  - path_prefix: /b\n"
                      "\n"
                      "  - {path_prefix: /c, mode: off}\n"));
  ASSERT_EQ(c.routes.size(), 3u);
  EXPECT_EQ(c.routes[0].name, "first");
  EXPECT_EQ(c.routes[1].name, "route-1");
  EXPECT_EQ(c.routes[2].name, "route-2");
  EXPECT_EQ(c.routes[0].line, 3);
  EXPECT_EQ(c.routes[1].line, 5);
  EXPECT_EQ(c.routes[2].line, 7);
  EXPECT_EQ(c.routes[2].mode, RouteMode::kOff);
}

TEST(RoutesTest, EmptyRouteListIsAllowed) {
  EXPECT_TRUE(MustLoad(std::string(kUpstream) + "routes: []\n").routes.empty());
}

TEST(RoutesTest, UnknownKeyInsideARoute) {
  EXPECT_TRUE(FailsAt(Routes("  - path_prefix: /a\n    method: [PUT]\n"), 4, "routes[0].method",
                      "unknown key; did you mean 'methods'? (expected one of name, path_prefix, "
                      "path_regex, methods"));
}

TEST(RoutesTest, RouteMustBeAMapping) {
  EXPECT_TRUE(
      FailsAt(Routes("  - path_prefix: /a\n  - /b\n"), 4, "routes[1]", "expected a mapping"));
}

TEST(RoutesTest, NeedsPrefixOrRegex) {
  EXPECT_TRUE(FailsAt(Routes("  - path_prefix: /a\n  - name: x\n    mode: shadow\n"), 4,
                      "routes[1]", "neither path_prefix nor path_regex"));
}

TEST(RoutesTest, PrefixAndRegexConflict) {
  EXPECT_TRUE(FailsAt(Routes("  - path_prefix: /a\n    path_regex: ^/a\n"), 4,
                      "routes[0].path_regex", "conflicts with path_prefix on line 3"));
}

TEST(RoutesTest, PrefixMustStartWithSlash) {
  EXPECT_TRUE(FailsAt(Routes("  - path_prefix: objects/\n"), 3, "routes[0].path_prefix",
                      "does not start with '/'"));
  EXPECT_TRUE(FailsAt(Routes("  - path_prefix: \"\"\n"), 3, "routes[0].path_prefix", "is empty"));
}

TEST(RoutesTest, RegexMustCompile) {
  EXPECT_TRUE(FailsAt(Routes("  - path_regex: \"^/a/([^/]+\"\n"), 3, "routes[0].path_regex",
                      "'^/a/([^/]+' is not a valid regex: "));
  EXPECT_TRUE(FailsAt(Routes("  - path_regex: \"[z-a]\"\n"), 3, "routes[0].path_regex",
                      "is not a valid regex"));
  EXPECT_TRUE(FailsAt(Routes("  - path_regex: \"\"\n"), 3, "routes[0].path_regex", "is empty"));
  // libstdc++ overflows a signed long while reading these (fuzz_config):
  // a count, the upper bound of a count, and a back-reference.
  for (const char* regex : {"^/(a{8888888888888888888})", "^/a{1,88888888888888888888}",
                            "^/(a)\\\\88888888888888888888"}) {
    EXPECT_TRUE(FailsAt(Routes(std::string("  - path_regex: \"") + regex + "\"\n"), 3,
                        "routes[0].path_regex",
                        "has a repetition count or back-reference of more than 6 digits"))
        << regex;
  }
  // A count of 6 digits reaches libstdc++, which refuses it by itself.
  EXPECT_TRUE(FailsAt(Routes("  - path_regex: \"^/a{1,999999}\"\n"), 3, "routes[0].path_regex",
                      "is not a valid regex"));
  // Digits are only counted where they are a count: an escaped brace is
  // literal, and so are digits in the path.
  EXPECT_EQ(MustLoad(Routes("  - path_regex: \"^/v\\\\{123456789\\\\}/2026113012345678/\"\n"))
                .routes.size(),
            1u);
  EXPECT_TRUE(MustLoad(Routes("  - path_regex: \"^/a{2,99}$\"\n")).routes.size() == 1u);
}

TEST(RoutesTest, MethodsAreUpperCased) {
  Config c = MustLoad(Routes("  - path_prefix: /\n    methods: [get, Post, PROPFIND]\n"));
  ASSERT_EQ(c.routes.size(), 1u);
  EXPECT_EQ(c.routes[0].methods, (std::vector<std::string>{"GET", "POST", "PROPFIND"}));
}

TEST(RoutesTest, BadMethods) {
  EXPECT_TRUE(FailsAt(Routes("  - path_prefix: /\n    methods: []\n"), 4, "routes[0].methods",
                      "empty list"));
  EXPECT_TRUE(FailsAt(Routes("  - path_prefix: /\n    methods: PUT\n"), 4, "routes[0].methods",
                      "is the value 'PUT'"));
  EXPECT_TRUE(FailsAt(Routes("  - path_prefix: /\n    methods: [PUT, put]\n"), 4,
                      "routes[0].methods[1]", "'PUT' is listed twice"));
  EXPECT_TRUE(FailsAt(Routes("  - path_prefix: /\n    methods:\n      - PUT\n      - \"PO ST\"\n"),
                      6, "routes[0].methods[1]", "not a method name"));
  EXPECT_TRUE(FailsAt(Routes("  - path_prefix: /\n    methods: [PUT, \"\"]\n"), 4,
                      "routes[0].methods[1]", "is empty"));
}

// A method is an RFC 9110 token: letters, digits and !#$%&'*+-.^_`|~.
// Anything else could never be a request's method, so the entry is a
// mistake (a list written as one string, a stray separator).
TEST(RoutesTest, MethodsThatAreNotHttpTokensAreRefused) {
  for (const char* method : {"\"PU T\"", "\"GET,\"", "\"GET, PUT\"", "\"PUT;\"", "\"(PUT)\"",
                             "\"PU/T\"", "\"PU\\\"T\"", "\"PU@T\"", "\"PU\\tT\"", "\"PÜT\"",
                             "\"PUT\\u007f\"", "\" PUT\"", "\"PU{T}\""}) {
    EXPECT_TRUE(FailsAt(Routes("  - path_prefix: /\n    methods:\n      - PUT\n      - " +
                               std::string(method) + "\n"),
                        6, "routes[0].methods[1]", "is not a method name"))
        << method;
  }
  EXPECT_TRUE(FailsAt(Routes("  - path_prefix: /\n    methods: [PUT, ~]\n"), 4,
                      "routes[0].methods[1]", "is empty (no value)"));
  EXPECT_TRUE(FailsAt(Routes("  - path_prefix: /\n    methods: [PUT, [GET]]\n"), 4,
                      "routes[0].methods[1]", "is a list"));
  // Every character a token may hold is accepted.
  Config c = MustLoad(Routes(
      "  - path_prefix: /\n    methods: [\"X-M_1.2\", \"!#$%&'*+-.^_`|~\"]\n"));
  ASSERT_EQ(c.routes.size(), 1u);
  EXPECT_EQ(c.routes[0].methods, (std::vector<std::string>{"X-M_1.2", "!#$%&'*+-.^_`|~"}));
}

// A misspelt method would leave the real one unfenced without a word.
TEST(RoutesTest, MethodsThatLookLikeTyposAreRefused) {
  for (const char* typo : {"PUTT", "DELTE", "PSOT", "PACTH", "DELET", "MKCLO", "PU"}) {
    EXPECT_TRUE(FailsAt(Routes("  - path_prefix: /\n    methods: [PUT, " + std::string(typo) +
                               "]\n"),
                        4, "routes[0].methods[1]", "did you mean"))
        << typo;
  }
  // Known methods and names far from any are accepted.
  Config c = MustLoad(
      Routes("  - path_prefix: /\n    methods: [LOCK, LINK, MKCOL, PROPPATCH, FROBNICATE]\n"));
  EXPECT_EQ(c.routes[0].methods.size(), 5u);
}

TEST(RoutesTest, PathParamsAndCaseInsensitive) {
  Config c = MustLoad(
      Routes("  - path_prefix: /a/\n    path_params: keep\n    case_insensitive: true\n"
             "  - path_prefix: /b/\n    path_params: refuse\n    case_insensitive: false\n"));
  EXPECT_TRUE(c.routes[0].keep_path_params);
  EXPECT_TRUE(c.routes[0].case_insensitive);
  EXPECT_FALSE(c.routes[1].keep_path_params);
  EXPECT_FALSE(c.routes[1].case_insensitive);
  EXPECT_TRUE(FailsAt(Routes("  - path_prefix: /a/\n    path_params: strip\n"), 4,
                      "routes[0].path_params", "refuse"));
  EXPECT_TRUE(FailsAt(Routes("  - path_prefix: /a/\n    case_insensitive: maybe\n"), 4,
                      "routes[0].case_insensitive", ""));
}

TEST(RoutesTest, Modes) {
  Config c =
      MustLoad(Routes("  - {path_prefix: /a, mode: enforce}\n"
                      "  - {path_prefix: /b, mode: shadow}\n"
                      "  - {path_prefix: /c, mode: \"off\"}\n"));
  ASSERT_EQ(c.routes.size(), 3u);
  EXPECT_EQ(c.routes[0].mode, RouteMode::kEnforce);
  EXPECT_EQ(c.routes[1].mode, RouteMode::kShadow);
  EXPECT_EQ(c.routes[2].mode, RouteMode::kOff);
  EXPECT_TRUE(FailsAt(Routes("  - path_prefix: /\n    mode: Enforce\n"), 4, "routes[0].mode",
                      "expected enforce, shadow or off"));
  EXPECT_TRUE(FailsAt(Routes("  - path_prefix: /\n    mode: false\n"), 4, "routes[0].mode",
                      "'false' is not allowed"));
}

// nesting and subtree_methods (docs/contract.md, "Nested resources").
TEST(RoutesTest, NestingAndSubtreeMethods) {
  Config c = MustLoad(
      Routes("  - {path_prefix: /a/, nesting: shared, subtree_methods: [delete, MOVE]}\n"
             "  - {path_prefix: /b/, nesting: \"off\", subtree_methods: []}\n"
             "  - path_prefix: /c/\n"));
  ASSERT_EQ(c.routes.size(), 3u);
  EXPECT_EQ(c.routes[0].nesting, RouteNesting::kShared);
  EXPECT_EQ(c.routes[0].subtree_methods, (std::vector<std::string>{"DELETE", "MOVE"}));
  EXPECT_EQ(c.routes[1].nesting, RouteNesting::kOff);
  EXPECT_EQ(c.routes[1].subtree_methods, std::vector<std::string>{});
  EXPECT_EQ(c.routes[2].nesting, RouteNesting::kPerKey);
  EXPECT_EQ(c.routes[2].subtree_methods, std::nullopt);  // the default list
  EXPECT_TRUE(FailsAt(Routes("  - path_prefix: /\n    nesting: tree\n"), 4, "routes[0].nesting",
                      "expected per_key, shared or off"));
  // --check says what a subtree method is.
  EXPECT_TRUE(FailsAt(Routes("  - path_prefix: /\n    subtree_methods: [GET]\n"), 4,
                      "routes[0].subtree_methods[0]",
                      "'GET' does not write (expected a list of the methods whose write may "
                      "change every path below its own"));
  EXPECT_TRUE(FailsAt(Routes("  - path_prefix: /\n    subtree_methods: [DELTE]\n"), 4,
                      "routes[0].subtree_methods[0]", "did you mean DELETE?"));
  EXPECT_TRUE(FailsAt(Routes("  - path_prefix: /\n    subtree_methods: [MOVE, MOVE]\n"), 4,
                      "routes[0].subtree_methods[1]", "'MOVE' is listed twice"));
}

TEST(RoutesTest, DuplicateNames) {
  EXPECT_TRUE(FailsAt(Routes("  - name: objects\n    path_prefix: /a\n"
                             "  - path_prefix: /b\n"
                             "    name: objects\n"),
                      6, "routes[1].name", "'objects' is already the name of routes[0] on line 3"));
  // A chosen name may collide with a default one.
  EXPECT_TRUE(FailsAt(Routes("  - path_prefix: /a\n  - {name: route-0, path_prefix: /b}\n"), 4,
                      "routes[1].name", "already the name of routes[0]"));
  EXPECT_TRUE(FailsAt(Routes("  - {name: route-1, path_prefix: /a}\n  - path_prefix: /b\n"), 4,
                      "routes[1].name", "already the name"));
}

TEST(RoutesTest, BadName) {
  EXPECT_TRUE(
      FailsAt(Routes("  - {name: \"\", path_prefix: /a}\n"), 3, "routes[0].name", "is empty"));
  EXPECT_TRUE(FailsAt(Routes("  - {name: \"a\\tb\", path_prefix: /a}\n"), 3, "routes[0].name",
                      "control character"));
}

TEST(RoutesTest, ErrorsInLaterRoutesNameTheirIndex) {
  EXPECT_TRUE(FailsAt(Routes("  - path_prefix: /a\n"
                             "  - path_prefix: /b\n"
                             "  - path_prefix: /c\n"
                             "    mode: strict\n"),
                      6, "routes[2].mode", "'strict'"));
}

}  // namespace
}  // namespace fencegate::config
