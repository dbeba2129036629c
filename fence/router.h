#pragma once
// Routing and key templates (docs/contract.md, "Keys and canonical paths").
// A Router is built once from the config's routes (immutable, shared by all
// threads) and answers, for a method and canonical path, which route applies
// and what key it fences.

#include <boost/container/small_vector.hpp>
#include <functional>
#include <memory>
#include <optional>
#include <regex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"

namespace fencegate::proxy {

inline constexpr size_t kMaxKeyBytes = 1024;

// A compiled key template: literal text, {path}, {1}..{9}, {header:Name}.
class KeyTemplate {
 public:
  // Returns nullopt and sets *error for a malformed template.
  static std::optional<KeyTemplate> Compile(std::string_view text, std::string* error);

  // Looks up a request header by (case-insensitive) name; nullopt if absent.
  using HeaderLookup = std::function<std::optional<std::string_view>(std::string_view name)>;

  enum class ExpandError { kNone, kMissingHeader, kEmpty, kTooLong, kBadByte };
  // Expands with the canonical path, the route regex captures (index 1..9;
  // a capture that did not participate expands to ""), and headers.
  // Errors: a referenced header is absent or empty (kMissingHeader), the key is
  // empty, longer than kMaxKeyBytes, or contains a control byte/NUL.
  ExpandError Expand(std::string_view path, std::span<const std::string> captures,
                     const HeaderLookup& headers, std::string* out) const;

  int max_capture() const { return max_capture_; }  // highest {N} used, 0 if none
  // The headers that {header:Name} parts name, in template order.
  const std::vector<std::string>& header_names() const { return header_names_; }

 private:
  struct Part {
    enum Kind { kLiteral, kPath, kCapture, kHeader } kind;
    std::string text;  // literal text or header name
    int index = 0;     // capture index
  };
  std::vector<Part> parts_;
  std::vector<std::string> header_names_;
  int max_capture_ = 0;
};

// GET, HEAD, OPTIONS and TRACE, spelled exactly so: the methods that do not
// write. Any other method, in any letter case, may write.
bool IsSafeMethod(std::string_view method);

// Whether `method` (any letter case) is in `list` (upper-case) or is not a
// method fencegate knows (config::kKnownMethods): a write that may change
// every path below its own.
bool IsSubtreeMethod(std::span<const std::string> list, std::string_view method);

// ASCII letters compared without regard to case. By hand: Beast 1.81's
// iequals reads one byte past the end of strings that differ only in case,
// and a method may end its buffer.
bool EqualsIgnoringCase(std::string_view a, std::string_view b);

struct Route {
  std::string name;
  // Used when !regex: matched against the decoded canonical path (case-folded
  // when case_insensitive), so it is held decoded (and folded) too.
  std::string prefix;
  std::optional<std::regex> regex;     // matched from the start of the path, with a
                                       // linear-time executor (see router.cc)
  // Upper-case; empty = every method that may write (!IsSafeMethod).
  // Compared without regard to letter case.
  std::vector<std::string> methods;
  KeyTemplate key;
  config::RouteMode mode = config::RouteMode::kEnforce;
  bool keep_path_params = false;  // path_params: keep
  bool case_insensitive = false;  // matched and keyed on the ASCII-lower-cased path
  // `idempotency:` (nullopt: off), and its scope compiled (nullopt: none).
  std::optional<config::IdempotencyConfig> idempotency;
  std::optional<KeyTemplate> idempotency_scope;
  // `nesting:` and `subtree_methods:` (docs/contract.md, "Nested resources").
  config::RouteNesting nesting = config::RouteNesting::kPerKey;
  std::vector<std::string> subtree_methods;  // upper-case

  // Whether a request with this method is one the route fences.
  bool Covers(std::string_view method) const;
  // Whether a write with this method may change every path below its own.
  bool Subtree(std::string_view method) const { return IsSubtreeMethod(subtree_methods, method); }
};

// (bugprone-exception-escape: small_vector's implicit move is not declared
// noexcept; it moves std::strings, whose move does not throw.)
struct RouteMatch {  // NOLINT(bugprone-exception-escape)
  const Route* route = nullptr;        // nullptr: no route matched -> pass through
  // [0] = whole match, [1..] groups. Inline up to two (a prefix route has
  // one): matching a write allocates nothing for them.
  boost::container::small_vector<std::string, 2> captures;
  bool fenced = false;                 // a route matched and its mode is not off
  // A case_insensitive route's copy of the canonical path, lower-cased.
  std::string folded;
  // The path the route matched and keys {path} with.
  std::string_view KeyPath(std::string_view canonical_path) const {
    return route != nullptr && route->case_insensitive ? std::string_view(folded)
                                                       : canonical_path;
  }
};

class Router {
 public:
  // Builds from config routes; nullptr + *error when a route is invalid.
  static std::unique_ptr<Router> Build(const std::vector<config::RouteConfig>& routes,
                                       std::string* error);
  // The first route whose path matches AND that covers one of `methods`
  // wins (first match wins). A route with mode off therefore exempts what it
  // matches from later routes. fenced = (mode != off). `methods` holds the
  // request's method and the ones its method-override headers name.
  RouteMatch Match(std::span<const std::string_view> methods,
                   std::string_view canonical_path) const;
  RouteMatch Match(std::string_view method, std::string_view canonical_path) const {
    return Match(std::span(&method, 1), canonical_path);
  }

  const std::vector<Route>& routes() const { return routes_; }

  // Whether a fenced path of the tree may lie at or below `path`: it is at
  // or above the top of a route whose paths enter the tree (nesting not
  // off, mode not off), or inside one. A subtree write outside every route
  // is decided by the store only then. For a prefix route the top is its
  // prefix's directory; for a regex route, the directory of its literal
  // beginning ("^/tenants/([^/]+)/" -> /tenants; "^/(a|b)/" -> /).
  bool TreeMayHoldBelow(std::string_view path) const;
  // A route of the tree matches case-insensitively: paths outside every
  // route enter the tree folded too.
  bool fold_uncovered() const { return fold_uncovered_; }
  // The subtree methods outside every route (config::kDefaultSubtreeMethods).
  const std::vector<std::string>& default_subtree_methods() const { return default_subtree_; }

 private:
  std::vector<Route> routes_;
  std::vector<std::string> tree_tops_;  // canonical directories, folded when case-insensitive
  bool fold_uncovered_ = false;
  std::vector<std::string> default_subtree_;
};

// Whether a route of the tree fences its writes under keys other than
// their paths (a template with captures or headers, or text around
// {path}): its keys cannot be mapped back to paths.
bool KeysOtherThanPaths(const Route& route);

// The path of the tree a stored key fences: the key itself when a write to
// it, on the route that matches it, is fenced under that key with the path
// as its target in the tree; nullopt otherwise (another template, a route
// with nesting: off, no route, not a canonical path).
std::optional<std::string> TreePathOfKey(const Router& router, std::string_view key);

}  // namespace fencegate::proxy
