#include "fence/router.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace fencegate::proxy {
namespace {

using config::RouteConfig;
using config::RouteMode;

std::vector<std::string> AsVector(const decltype(RouteMatch::captures)& captures) {
  return {captures.begin(), captures.end()};
}

RouteConfig Prefix(std::string name, std::string prefix, RouteMode mode = RouteMode::kEnforce) {
  RouteConfig rc;
  rc.name = std::move(name);
  rc.path_prefix = std::move(prefix);
  rc.mode = mode;
  return rc;
}

RouteConfig Regex(std::string name, std::string regex, std::string key = "{path}") {
  RouteConfig rc;
  rc.name = std::move(name);
  rc.path_regex = std::move(regex);
  rc.key = std::move(key);
  return rc;
}

RouteConfig WithMethods(RouteConfig rc, std::vector<std::string> methods) {
  rc.methods = std::move(methods);
  return rc;
}

std::unique_ptr<Router> MustBuild(const std::vector<RouteConfig>& routes) {
  std::string error;
  std::unique_ptr<Router> r = Router::Build(routes, &error);
  EXPECT_NE(r, nullptr) << error;
  return r;
}

// Name of the matched route, "" for pass-through.
std::string MatchName(const Router& r, std::string_view method, std::string_view path) {
  const RouteMatch m = r.Match(method, path);
  return m.route ? m.route->name : "";
}

TEST(Router, NoRoutesPassesEverythingThrough) {
  auto r = MustBuild({});
  ASSERT_NE(r, nullptr);
  const RouteMatch m = r->Match("PUT", "/objects/a");
  EXPECT_EQ(m.route, nullptr);
  EXPECT_FALSE(m.fenced);
  EXPECT_TRUE(m.captures.empty());
}

TEST(Router, FirstMatchWins) {
  auto r = MustBuild({Prefix("narrow", "/objects/special/"), Prefix("wide", "/objects/"),
                      Prefix("also-wide", "/objects/")});
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(MatchName(*r, "PUT", "/objects/special/x"), "narrow");
  EXPECT_EQ(MatchName(*r, "PUT", "/objects/x"), "wide");
  EXPECT_EQ(MatchName(*r, "PUT", "/other/x"), "");
}

TEST(Router, OrderMattersWhenWideRouteComesFirst) {
  auto r = MustBuild({Prefix("wide", "/objects/"), Prefix("narrow", "/objects/special/")});
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(MatchName(*r, "PUT", "/objects/special/x"), "wide");
}

TEST(Router, ModeOffExemptsFromLaterRoutes) {
  auto r =
      MustBuild({Prefix("public", "/objects/public/", RouteMode::kOff),
                 Prefix("objects", "/objects/"), Prefix("shadow", "/shadow/", RouteMode::kShadow)});
  ASSERT_NE(r, nullptr);
  RouteMatch m = r->Match("PUT", "/objects/public/x");
  ASSERT_NE(m.route, nullptr);
  EXPECT_EQ(m.route->name, "public");
  EXPECT_FALSE(m.fenced);

  m = r->Match("PUT", "/objects/x");
  ASSERT_NE(m.route, nullptr);
  EXPECT_EQ(m.route->name, "objects");
  EXPECT_TRUE(m.fenced);

  m = r->Match("PUT", "/shadow/x");
  ASSERT_NE(m.route, nullptr);
  EXPECT_EQ(m.route->mode, RouteMode::kShadow);
  EXPECT_TRUE(m.fenced);
}

TEST(Router, MethodNotInSetFallsThrough) {
  auto r = MustBuild({WithMethods(Prefix("puts", "/a/"), {"PUT"}),
                      WithMethods(Prefix("posts", "/a/"), {"POST", "DELETE"})});
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(MatchName(*r, "PUT", "/a/x"), "puts");
  EXPECT_EQ(MatchName(*r, "POST", "/a/x"), "posts");
  EXPECT_EQ(MatchName(*r, "DELETE", "/a/x"), "posts");
  EXPECT_EQ(MatchName(*r, "GET", "/a/x"), "");
  EXPECT_EQ(MatchName(*r, "PATCH", "/a/x"), "");
}

// By default a route fences every method but GET, HEAD, OPTIONS and TRACE:
// WebDAV's, unknown ones, and known ones in another letter case, which
// lenient backends run as the upper-case method.
TEST(Router, DefaultFencesEveryMethodThatMayWrite) {
  auto r = MustBuild({Prefix("objects", "/objects/")});
  ASSERT_NE(r, nullptr);
  for (const char* m : {"PUT", "POST", "PATCH", "DELETE", "CONNECT", "MKCOL", "PROPPATCH", "LOCK",
                        "UNLOCK", "COPY", "MOVE", "FROB", "put", "Put", "get", "Get", "head"}) {
    EXPECT_EQ(MatchName(*r, m, "/objects/a"), "objects") << m;
  }
  for (const char* m : {"GET", "HEAD", "OPTIONS", "TRACE"}) {
    EXPECT_EQ(MatchName(*r, m, "/objects/a"), "") << m;
  }
}

TEST(Router, ListedMethodsMatchInAnyLetterCase) {
  auto r = MustBuild({WithMethods(Prefix("objects", "/objects/"), {"PUT"})});
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(MatchName(*r, "PUT", "/objects/a"), "objects");
  EXPECT_EQ(MatchName(*r, "put", "/objects/a"), "objects");
  EXPECT_EQ(MatchName(*r, "pUt", "/objects/a"), "objects");
  EXPECT_EQ(MatchName(*r, "PUTX", "/objects/a"), "");
  EXPECT_EQ(MatchName(*r, "PU", "/objects/a"), "");
  EXPECT_EQ(MatchName(*r, "DELETE", "/objects/a"), "");
}

// A method that ends its buffer, compared with a listed one that differs
// only in case: nothing past its end is read (an over-read here is what
// the ASan build reports; Beast's iequals made one).
TEST(Router, AMethodAtTheEndOfItsBufferIsComparedWithinIt) {
  auto r = MustBuild({WithMethods(Prefix("objects", "/objects/"), {"PUT"})});
  ASSERT_NE(r, nullptr);
  const auto bytes = std::make_unique<char[]>(3);
  std::memcpy(bytes.get(), "put", 3);
  EXPECT_EQ(MatchName(*r, std::string_view(bytes.get(), 3), "/objects/a"), "objects");
  EXPECT_TRUE(EqualsIgnoringCase("MkCol", "mkcol"));
  EXPECT_FALSE(EqualsIgnoringCase("MKCOL", "MKCOLS"));
  EXPECT_FALSE(EqualsIgnoringCase("PUT", "PUU"));
}

// A request's methods are its own and those its override headers name: a
// route covering any of them matches.
TEST(Router, AnyOfTheRequestsMethodsMatches) {
  auto r = MustBuild({WithMethods(Prefix("objects", "/objects/"), {"DELETE"})});
  ASSERT_NE(r, nullptr);
  const std::vector<std::string_view> post_as_delete = {"POST", "DELETE"};
  EXPECT_NE(r->Match(post_as_delete, "/objects/a").route, nullptr);
  const std::vector<std::string_view> post_as_put = {"POST", "PUT"};
  EXPECT_EQ(r->Match(post_as_put, "/objects/a").route, nullptr);
}

// A backend on a case-insensitive file system resolves "/Objects/A" and
// "/objects/a" to one file: such a route matches and keys the folded path.
TEST(Router, CaseInsensitiveRouteMatchesAndKeysTheFoldedPath) {
  RouteConfig ci = Prefix("ci", "/Objects/");
  ci.case_insensitive = true;
  RouteConfig re = Regex("re", "^/Tenants/([^/]+)/", "{1}:{path}");
  re.case_insensitive = true;
  auto r = MustBuild({ci, re});
  ASSERT_NE(r, nullptr);
  for (const char* path : {"/objects/readme", "/OBJECTS/README", "/Objects/ReadMe"}) {
    const RouteMatch m = r->Match("PUT", path);
    ASSERT_NE(m.route, nullptr) << path;
    EXPECT_EQ(m.route->name, "ci");
    std::string key;
    ASSERT_EQ(m.route->key.Expand(m.KeyPath(path), m.captures, nullptr, &key),
              KeyTemplate::ExpandError::kNone);
    EXPECT_EQ(key, "/objects/readme") << path;
  }
  for (const char* path : {"/tenants/acme/x", "/TENANTS/Acme/X"}) {
    const RouteMatch m = r->Match("PUT", path);
    ASSERT_NE(m.route, nullptr) << path;
    EXPECT_EQ(m.route->name, "re");
    std::string key;
    ASSERT_EQ(m.route->key.Expand(m.KeyPath(path), m.captures, nullptr, &key),
              KeyTemplate::ExpandError::kNone);
    EXPECT_EQ(key, "acme:/tenants/acme/x") << path;
  }
  // A case-sensitive route keys the path as it is.
  auto cs = MustBuild({Prefix("cs", "/objects/")});
  EXPECT_EQ(MatchName(*cs, "PUT", "/OBJECTS/a"), "");
}

TEST(Router, PrefixIsAPlainStringPrefix) {
  auto r = MustBuild({Prefix("slash", "/objects/"), Prefix("bare", "/data")});
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(MatchName(*r, "PUT", "/objects/"), "slash");
  EXPECT_EQ(MatchName(*r, "PUT", "/objects"), "slash");  // the route's root
  EXPECT_EQ(MatchName(*r, "PUT", "/objectsx"), "");
  EXPECT_EQ(MatchName(*r, "PUT", "/data"), "bare");
  EXPECT_EQ(MatchName(*r, "PUT", "/database"), "bare");  // no segment boundary
  EXPECT_EQ(MatchName(*r, "PUT", "/x/objects/"), "");
}

TEST(Router, PrefixCaptureZeroIsThePrefix) {
  auto r = MustBuild({Prefix("objects", "/objects/")});
  ASSERT_NE(r, nullptr);
  const RouteMatch m = r->Match("PUT", "/objects/a");
  EXPECT_EQ(AsVector(m.captures), std::vector<std::string>{"/objects/"});
}

TEST(Router, RegexIsAnchoredAtTheStart) {
  auto r = MustBuild({Regex("tenants", "/tenants/([^/]+)/"), Regex("caret", "^/c/")});
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(MatchName(*r, "PUT", "/tenants/acme/x"), "tenants");
  EXPECT_EQ(MatchName(*r, "PUT", "/x/tenants/acme/"), "");
  EXPECT_EQ(MatchName(*r, "PUT", "/tenants//x"), "");
  EXPECT_EQ(MatchName(*r, "PUT", "/c/x"), "caret");
  EXPECT_EQ(MatchName(*r, "PUT", "/a/c/x"), "");
}

TEST(Router, RegexNeedNotMatchTheWholePath) {
  auto r = MustBuild({Regex("a", "/a")});
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(MatchName(*r, "PUT", "/abc/d"), "a");
}

TEST(Router, RegexCapturesFeedTheKey) {
  auto r = MustBuild({Regex("t", "^/tenants/([^/]+)/(objects|blobs)(/v2)?/", "{1}:{2}{3}")});
  ASSERT_NE(r, nullptr);
  RouteMatch m = r->Match("POST", "/tenants/acme/blobs/k");
  ASSERT_NE(m.route, nullptr);
  EXPECT_EQ(AsVector(m.captures),
            (std::vector<std::string>{"/tenants/acme/blobs/", "acme", "blobs", ""}));
  std::string key;
  ASSERT_EQ(m.route->key.Expand("/tenants/acme/blobs/k", m.captures, nullptr, &key),
            KeyTemplate::ExpandError::kNone);
  EXPECT_EQ(key, "acme:blobs");

  m = r->Match("POST", "/tenants/acme/objects/v2/k");
  ASSERT_NE(m.route, nullptr);
  ASSERT_EQ(m.route->key.Expand("/tenants/acme/objects/v2/k", m.captures, nullptr, &key),
            KeyTemplate::ExpandError::kNone);
  EXPECT_EQ(key, "acme:objects/v2");
}

// The backtracking executor recurses per byte and overflows an 8 MB stack on
// about 11 KB with this pattern; the router must survive any path length.
TEST(Router, LongPathAgainstRegexDoesNotOverflowTheStack) {
  auto r =
      MustBuild({Regex("files", "/files/((a|b)/?)*", "{1}"), Regex("all", "/all/(.*)", "{1}")});
  ASSERT_NE(r, nullptr);
  std::string path = "/files/";
  while (path.size() < 256 * 1024) path += "ab/";
  RouteMatch m = r->Match("PUT", path);
  ASSERT_NE(m.route, nullptr);
  EXPECT_EQ(m.captures.at(0).size(), path.size());

  const std::string all = "/all/" + std::string(256 * 1024, 'a');
  m = r->Match("PUT", all);
  ASSERT_NE(m.route, nullptr);
  EXPECT_EQ(m.captures.at(1).size(), 256u * 1024u);
}

// "/(a+)+b" backtracks exponentially (minutes for 32 bytes) in the default
// executor; the router's regexes must stay linear in the path.
TEST(Router, NestedQuantifierDoesNotBacktrackExponentially) {
  auto r = MustBuild({Regex("redos", "/(a+)+b")});
  ASSERT_NE(r, nullptr);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(MatchName(*r, "PUT", "/" + std::string(32, 'a')), "");
  }
  EXPECT_EQ(MatchName(*r, "PUT", "/" + std::string(32, 'a') + "b"), "redos");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

// Documented consequence of the linear executor: among alternatives that
// both match, the longer one wins (ECMAScript backtracking would take "/a").
TEST(Router, AlternationPrefersTheLongerMatch) {
  auto r = MustBuild({Regex("alt", "(/a|/ab)")});
  ASSERT_NE(r, nullptr);
  const RouteMatch m = r->Match("PUT", "/abc");
  ASSERT_NE(m.route, nullptr);
  EXPECT_EQ(m.captures.at(1), "/ab");
}

TEST(Router, KeepsRouteFields) {
  RouteConfig rc = WithMethods(Prefix("objects", "/objects/", RouteMode::kShadow), {"PUT"});
  rc.key = "k/{path}";
  auto r = MustBuild({rc, Regex("re", "/r/(x)", "{1}")});
  ASSERT_NE(r, nullptr);
  ASSERT_EQ(r->routes().size(), 2u);
  const Route& a = r->routes()[0];
  EXPECT_EQ(a.name, "objects");
  EXPECT_EQ(a.prefix, "/objects/");
  EXPECT_FALSE(a.regex.has_value());
  EXPECT_EQ(a.methods, std::vector<std::string>{"PUT"});
  EXPECT_EQ(a.mode, RouteMode::kShadow);
  std::string key;
  ASSERT_EQ(a.key.Expand("/objects/z", {}, nullptr, &key), KeyTemplate::ExpandError::kNone);
  EXPECT_EQ(key, "k//objects/z");
  EXPECT_TRUE(r->routes()[1].regex.has_value());
  EXPECT_EQ(r->routes()[1].key.max_capture(), 1);
}

struct BuildErrorCase {
  std::string label;
  RouteConfig route;
  std::string error_contains;
};

void PrintTo(const BuildErrorCase& c, std::ostream* os) { *os << c.label; }

class RouterBuildError : public ::testing::TestWithParam<BuildErrorCase> {};

TEST_P(RouterBuildError, IsReported) {
  const BuildErrorCase& c = GetParam();
  std::string error;
  // A valid route first: the error must name the bad one, at index 1.
  std::unique_ptr<Router> r = Router::Build({Prefix("good", "/ok/"), c.route}, &error);
  EXPECT_EQ(r, nullptr);
  EXPECT_NE(error.find("'" + c.route.name + "'"), std::string::npos) << error;
  EXPECT_NE(error.find("routes[1]"), std::string::npos) << error;
  EXPECT_NE(error.find(c.error_contains), std::string::npos) << error;
}

RouteConfig Both() {
  RouteConfig rc = Prefix("both", "/a/");
  rc.path_regex = "/a/";
  return rc;
}

RouteConfig Keyed(RouteConfig rc, std::string key) {
  rc.key = std::move(key);
  return rc;
}

INSTANTIATE_TEST_SUITE_P(
    Contract, RouterBuildError,
    ::testing::Values(
        BuildErrorCase{"bad_regex", Regex("re", "/a/(b"), "path_regex"},
        BuildErrorCase{"bad_regex_bracket", Regex("re2", "/a/[b"), "path_regex"},
        BuildErrorCase{"regex_backreference", Regex("br", "/(a)/\\1/"), "path_regex"},
        BuildErrorCase{"both", Both(), "exactly one"},
        BuildErrorCase{"neither", Prefix("neither", ""), "exactly one"},
        BuildErrorCase{"prefix_not_absolute", Prefix("rel", "objects/"), "path_prefix"},
        BuildErrorCase{"prefix_double_slash", Prefix("dbl", "/a//b/"), "'/a/b/'"},
        BuildErrorCase{"prefix_dot", Prefix("dot", "/a/./b"), "'/a/b'"},
        BuildErrorCase{"prefix_lower_escape", Prefix("esc", "/caf%c3%a9"), "'/caf%C3%A9'"},
        BuildErrorCase{"prefix_query", Prefix("q", "/a?x=1"), "path_prefix"},
        BuildErrorCase{"prefix_encoded_slash", Prefix("es", "/a%2Fb"), "encoded slash"},
        BuildErrorCase{"bad_key", Keyed(Prefix("bk", "/a/"), "{nope}"), "{nope}"},
        BuildErrorCase{"empty_key", Keyed(Prefix("ek", "/a/"), ""), "key"},
        BuildErrorCase{"capture_on_prefix", Keyed(Prefix("cp", "/a/"), "{1}"), "{1}"},
        BuildErrorCase{"capture_beyond_groups", Regex("cg", "/a/(b)/", "{1}{2}"), "{2}"},
        BuildErrorCase{"lower_method", WithMethods(Prefix("lm", "/a/"), {"PUT", "post"}), "'post'"},
        BuildErrorCase{"empty_method", WithMethods(Prefix("em", "/a/"), {""}), "method"},
        BuildErrorCase{"space_method", WithMethods(Prefix("sm", "/a/"), {"P UT"}), "'P UT'"}));

TEST(RouterBuild, PrefixIsHeldDecoded) {
  auto r = MustBuild({Prefix("colon", "/a:b/"), Prefix("utf8", "/caf%C3%A9/")});
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->routes()[0].prefix, "/a:b/");
  EXPECT_EQ(r->routes()[1].prefix, "/caf\xC3\xA9/");
  EXPECT_EQ(MatchName(*r, "PUT", "/caf\xC3\xA9/x"), "utf8");
}

TEST(RouterBuild, PrefixMustBeItsCanonicalSpelling) {
  std::string error;
  EXPECT_EQ(Router::Build({Prefix("p", "/a%3Ab/")}, &error), nullptr);
  EXPECT_NE(error.find("'/a:b/'"), std::string::npos) << error;
}

TEST(RouterBuild, ErrorMentionsConfigLine) {
  RouteConfig rc = Regex("lined", "(");
  rc.line = 17;
  std::string error;
  EXPECT_EQ(Router::Build({rc}, &error), nullptr);
  EXPECT_NE(error.find("line 17"), std::string::npos) << error;
}

}  // namespace
}  // namespace fencegate::proxy
