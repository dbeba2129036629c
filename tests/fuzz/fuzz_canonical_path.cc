// Fuzz target: canonical path, routing and key templates (docs/contract.md,
// "Keys and canonical paths").
//
// Input: up to three lines.
//   line 1: a request target ("/objects//a/../b?x=1")
//   line 2: a key template (optional; default "{path}")
//   line 3: the value of the X-Tenant header (optional; absent when missing)
//
// Invariants checked (a violation traps):
//  - a canonical path starts with '/', has no empty, "." or ".." segment and
//    no trailing slash (but "/"), no NUL or backslash;
//  - the forwarded spelling holds only pchar bytes and upper-case %XX
//    escapes of the bytes that are not, decodes to the canonical path
//    (plus the trailing slash it reports), and is never longer than the
//    input;
//  - canonicalizing the forwarded spelling gives the same path and
//    spelling (idempotent), and the query comes back unchanged;
//  - a matched route's whole match is a prefix of the path, or the path
//    as a directory (a route covers its root);
//  - every key Classify fences is 1..1024 bytes without control bytes;
//    a "{path}" route fences the canonical path itself;
//  - the config loader (ValidateKeyTemplate) and the router
//    (KeyTemplate::Compile, Router::Build) accept the same templates, and
//    an expanded key obeys the same bounds.

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/fields.hpp>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "config/config.h"
#include "config/internal.h"
#include "fence/canonical_path.h"
#include "fence/classify.h"
#include "fence/router.h"
#include "tests/fuzz/fuzz_util.h"

namespace fencegate::fuzz {
namespace {

using config::RouteConfig;
using config::RouteMode;
using proxy::CanonicalTarget;
using proxy::PathError;

RouteConfig Route(std::string name, std::string prefix, std::string regex, std::string key,
                  RouteMode mode = RouteMode::kEnforce) {
  RouteConfig rc;
  rc.name = std::move(name);
  rc.path_prefix = std::move(prefix);
  rc.path_regex = std::move(regex);
  rc.key = std::move(key);
  rc.mode = mode;
  return rc;
}

const proxy::Router& FixedRouter() {
  static const std::unique_ptr<proxy::Router> router = [] {
    std::string error;
    auto r = proxy::Router::Build(
        {Route("health", "/documents/_health", "", "{path}", RouteMode::kOff),
         Route("objects", "/objects/", "", "{path}"),
         Route("tenants", "", "^/tenants/([^/]+)/(.*)$", "tenant/{1}/{2}"),
         Route("documents", "/documents/", "", "{header:X-Tenant}:{path}"),
         Route("shadow", "/shadow/", "", "{header:X-Tenant}{path}", RouteMode::kShadow),
         Route("any", "", "^/([^/]*)/?([^/]*)/?(.*)", "k:{3}:{2}:{1}")},
        &error);
    FUZZ_CHECK(r != nullptr);
    return r;
  }();
  return *router;
}

// The three-group regex a template under test is expanded against.
const std::regex& TemplateRegex() {
  static const std::regex re("^/([^/]*)/?([^/]*)/?(.*)", std::regex::ECMAScript);
  return re;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;  // lower case is not canonical
}

bool IsPchar(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
         std::string_view("-._~!$&'()*+,;=:@").find(static_cast<char>(c)) != std::string_view::npos;
}

void CheckCanonicalShape(const CanonicalTarget& target) {
  const std::string_view path = target.path;
  FUZZ_CHECK(!path.empty() && path.front() == '/');
  FUZZ_CHECK(path.size() == 1 || path.back() != '/');
  FUZZ_CHECK(!target.trailing_slash || path.size() > 1);
  size_t seg_start = 1;
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') {
      std::string_view seg = path.substr(seg_start, i - seg_start);
      FUZZ_CHECK(!seg.empty() || path.size() == 1);
      FUZZ_CHECK(seg != "." && seg != "..");
      seg_start = i + 1;
      continue;
    }
    FUZZ_CHECK(path[i] != '\0' && path[i] != '\\');
  }
  // The forwarded spelling: pchar bytes raw, every other byte escaped.
  std::string decoded;
  const std::string_view forward = target.forward;
  for (size_t i = 0; i < forward.size(); ++i) {
    const auto c = static_cast<unsigned char>(forward[i]);
    if (c == '%') {
      FUZZ_CHECK(i + 2 < forward.size());
      const int hi = HexValue(forward[i + 1]);
      const int lo = HexValue(forward[i + 2]);
      FUZZ_CHECK(hi >= 0 && lo >= 0);
      const auto byte = static_cast<unsigned char>(hi * 16 + lo);
      FUZZ_CHECK(!IsPchar(byte) && byte != '/');
      decoded.push_back(static_cast<char>(byte));
      i += 2;
      continue;
    }
    FUZZ_CHECK(IsPchar(c) || c == '/');
    decoded.push_back(static_cast<char>(c));
  }
  FUZZ_CHECK(decoded == (target.trailing_slash ? std::string(path) + "/" : std::string(path)));
}

void CheckKey(std::string_view key) {
  FUZZ_CHECK(!key.empty() && key.size() <= proxy::kMaxKeyBytes);
  for (unsigned char c : key) FUZZ_CHECK(c >= 0x20 && c != 0x7f);
}

void CheckRouting(const CanonicalTarget& target, std::optional<std::string_view> tenant) {
  const proxy::Router& router = FixedRouter();
  boost::beast::http::fields headers;
  headers.set("Fencing-Token", "7");
  if (tenant) headers.set("X-Tenant", *tenant);
  for (std::string_view method : {"PUT", "GET"}) {
    proxy::RouteMatch m = router.Match(method, target.path);
    if (m.route) {
      FUZZ_CHECK(!m.captures.empty());
      // The match is a prefix of the path, or of the path as a directory:
      // a route covers its root ("/objects" for "/objects/").
      const std::string as_directory = target.path + "/";
      FUZZ_CHECK(std::string_view(target.path).starts_with(m.captures[0]) ||
                 (m.captures[0] == as_directory));
    }
    proxy::WriteIntent intent =
        proxy::Classify(proxy::FenceSettings{}, router, method, target.path, headers);
    FUZZ_CHECK(intent.route == m.route);
    if (intent.kind == proxy::WriteIntent::Kind::kFence) {
      CheckKey(intent.key);
      FUZZ_CHECK(intent.token == 7);
      if (intent.route->name == "objects") FUZZ_CHECK(intent.key == target.path);
    }
  }
}

void CheckTemplate(std::string_view text, std::string_view path,
                   std::optional<std::string_view> tenant) {
  std::string error;
  std::optional<proxy::KeyTemplate> compiled = proxy::KeyTemplate::Compile(text, &error);
  // The loader and the router must agree on what a template is.
  const bool config_ok = config::internal::ValidateKeyTemplate(text, 9, true).empty();
  FUZZ_CHECK(config_ok == compiled.has_value());
  const bool config_ok_prefix = config::internal::ValidateKeyTemplate(text, 0, false).empty();
  FUZZ_CHECK(config_ok_prefix == (compiled.has_value() && compiled->max_capture() == 0));
  if (!compiled) {
    FUZZ_CHECK(!error.empty());
    return;
  }

  // Through the router too: a route whose regex has three groups.
  RouteConfig rc = Route("t", "", "^/([^/]*)/?([^/]*)/?(.*)", std::string(text));
  std::unique_ptr<proxy::Router> router = proxy::Router::Build({rc}, &error);
  FUZZ_CHECK((router != nullptr) == (compiled->max_capture() <= 3));

  std::match_results<std::string_view::const_iterator> groups;
  std::vector<std::string> captures;
  if (std::regex_search(path.begin(), path.end(), groups, TemplateRegex())) {
    for (const auto& g : groups) captures.emplace_back(g.matched ? g.str() : std::string());
  }
  auto lookup = [tenant](std::string_view name) -> std::optional<std::string_view> {
    if (tenant && boost::beast::iequals(name, "X-Tenant")) return tenant;
    return std::nullopt;
  };
  std::string key;
  auto err = compiled->Expand(path, captures, lookup, &key);
  if (err == proxy::KeyTemplate::ExpandError::kNone) {
    CheckKey(key);
    if (text == "{path}") FUZZ_CHECK(key == path);
  }
}

}  // namespace
}  // namespace fencegate::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fencegate::fuzz;
  std::string_view rest = AsText(data, size);
  const std::string_view target_text = NextLine(&rest);
  const bool has_template = !rest.empty();
  const std::string_view template_text = has_template ? NextLine(&rest) : "{path}";
  std::optional<std::string_view> tenant;
  if (!rest.empty()) tenant = NextLine(&rest);

  CanonicalTarget target;
  const PathError err = fencegate::proxy::CanonicalizeTarget(target_text, &target);
  FUZZ_CHECK(fencegate::proxy::PathErrorMessage(err) != nullptr);
  {
    CanonicalTarget walked;
    FUZZ_CHECK(fencegate::proxy::detail::CanonicalizeTargetWalk(target_text, &walked) == err);
  }
  if (err != PathError::kNone) {
    if (has_template) CheckTemplate(template_text, "/", tenant);
    return 0;
  }

  // The shortcut for a path that is canonical already agrees with the walk.
  CanonicalTarget walked;
  FUZZ_CHECK(fencegate::proxy::detail::CanonicalizeTargetWalk(target_text, &walked) ==
             PathError::kNone);
  FUZZ_CHECK(walked.path == target.path && walked.forward == target.forward &&
             walked.trailing_slash == target.trailing_slash && walked.query == target.query &&
             walked.has_query == target.has_query);

  const std::string_view raw = target_text.substr(0, target_text.find('?'));
  CheckCanonicalShape(target);
  FUZZ_CHECK(target.path.size() <= raw.size());
  FUZZ_CHECK(target.forward.size() <= raw.size());
  FUZZ_CHECK(target.has_query == (target_text.find('?') != std::string_view::npos));

  // Idempotent: the forwarded spelling is its own canonical form.
  CanonicalTarget again;
  FUZZ_CHECK(fencegate::proxy::CanonicalizeTarget(target.forward, &again) == PathError::kNone);
  FUZZ_CHECK(again.path == target.path && again.forward == target.forward && !again.has_query);
  if (target.has_query) {
    const std::string with_query = target.forward + "?" + target.query;
    FUZZ_CHECK(fencegate::proxy::CanonicalizeTarget(with_query, &again) == PathError::kNone);
    FUZZ_CHECK(again.path == target.path && again.query == target.query);
  }

  CheckRouting(target, tenant);
  CheckTemplate(template_text, target.path, tenant);
  return 0;
}
