#include "fence/router.h"

#include <algorithm>
#include <array>

#include "fence/canonical_path.h"
#include "fence/tchar.h"
#include "storage/tree.h"

namespace fencegate::proxy {
namespace {

bool IsControl(unsigned char c) { return c < 0x20 || c == 0x7f; }

bool IsToken(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(),
                                   [](char c) { return IsTchar(static_cast<unsigned char>(c)); });
}

constexpr std::string_view kHeaderPrefix = "header:";

// Route regexes run on every request against a path the client chooses.
// libstdc++'s default (backtracking) executor recurses once per input byte
// and backtracks exponentially: a pattern like "/f/((a|b)/?)*" overflows an
// 8 MB stack on an ~11 KB path and "/(a+)+b" takes minutes on 30 bytes.
// The __polynomial flag selects its Thompson-NFA executor instead: linear in
// the path, stack bounded by the pattern. Costs: back-references are refused
// (Build reports them), and in rare alternations the longer branch wins
// ("/a|/ab" on "/abc" matches "/ab"); the result is still deterministic.
#if defined(__GLIBCXX__)
constexpr auto kRegexFlags = std::regex::ECMAScript | std::regex_constants::__polynomial;
#else
constexpr auto kRegexFlags = std::regex::ECMAScript;
#endif

// "route 'objects' (routes[0], line 12): "
std::string RouteContext(const config::RouteConfig& rc, size_t index) {
  std::string s = "route '" + rc.name + "' (routes[" + std::to_string(index) + "]";
  if (rc.line > 0) s += ", line " + std::to_string(rc.line);
  return s + "): ";
}

char AsciiLower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c; }

void FoldInto(std::string_view path, std::string* out) {
  out->resize(path.size());
  std::transform(path.begin(), path.end(), out->begin(), AsciiLower);
}

}  // namespace

bool IsSafeMethod(std::string_view method) {
  return method == "GET" || method == "HEAD" || method == "OPTIONS" || method == "TRACE";
}

bool EqualsIgnoringCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(),
                    [](char x, char y) { return AsciiLower(x) == AsciiLower(y); });
}

bool Route::Covers(std::string_view method) const {
  if (methods.empty()) return !IsSafeMethod(method);
  return std::any_of(methods.begin(), methods.end(),
                     [method](const std::string& m) { return EqualsIgnoringCase(m, method); });
}

bool IsSubtreeMethod(std::span<const std::string> list, std::string_view method) {
  if (std::any_of(list.begin(), list.end(),
                  [method](const std::string& m) { return EqualsIgnoringCase(m, method); })) {
    return true;
  }
  return std::none_of(std::begin(config::kKnownMethods), std::end(config::kKnownMethods),
                      [method](std::string_view m) { return EqualsIgnoringCase(m, method); });
}

namespace {

// The directory a path prefix or a literal beginning lies in: "/objects/" ->
// "/objects", "/obj" -> "/", "/a/b" -> "/a".
std::string DirectoryOf(std::string_view literal) {
  const size_t slash = literal.rfind('/');
  if (slash == std::string_view::npos || slash == 0) return "/";
  return std::string(literal.substr(0, slash));
}

// The literal text a regex matched from the start of a path begins with:
// characters up to the first that is not plain ("^/tenants/([^/]+)/" ->
// "/tenants/"). An escaped '/' counts as plain.
std::string LiteralBeginning(std::string_view regex) {
  if (regex.starts_with('^')) regex.remove_prefix(1);
  std::string out;
  for (size_t i = 0; i < regex.size(); ++i) {
    const char c = regex[i];
    if (c == '\\' && i + 1 < regex.size() && regex[i + 1] == '/') {
      out.push_back('/');
      ++i;
      continue;
    }
    if (std::string_view(".*+?()[]{}|\\^$").find(c) != std::string_view::npos) {
      // A quantifier makes the character before it optional.
      if ((c == '*' || c == '?' || c == '{') && !out.empty()) out.pop_back();
      break;
    }
    out.push_back(c);
  }
  return out;
}

bool AtOrBelow(std::string_view path, std::string_view dir) {
  if (dir == "/") return true;
  return path.starts_with(dir) && (path.size() == dir.size() || path[dir.size()] == '/');
}

}  // namespace

bool Router::TreeMayHoldBelow(std::string_view path) const {
  std::string folded;
  if (fold_uncovered_) {
    FoldInto(path, &folded);
    path = folded;
  }
  return std::any_of(tree_tops_.begin(), tree_tops_.end(), [path](const std::string& top) {
    return AtOrBelow(top, path) || AtOrBelow(path, top);
  });
}

std::optional<KeyTemplate> KeyTemplate::Compile(std::string_view text, std::string* error) {
  if (text.empty()) {
    *error = "key template is empty";
    return std::nullopt;
  }
  KeyTemplate t;
  auto add_literal = [&t](char c) {
    if (t.parts_.empty() || t.parts_.back().kind != Part::kLiteral) {
      t.parts_.push_back(Part{Part::kLiteral, "", 0});
    }
    t.parts_.back().text.push_back(c);
  };

  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '}') {
      *error = "unmatched '}' at offset " + std::to_string(i) + " in key template";
      return std::nullopt;
    }
    if (IsControl(static_cast<unsigned char>(c))) {
      *error = "control character at offset " + std::to_string(i) + " in key template";
      return std::nullopt;
    }
    if (c != '{') {
      add_literal(c);
      continue;
    }
    const size_t close = text.find('}', i + 1);
    if (close == std::string_view::npos) {
      *error = "unclosed '{' at offset " + std::to_string(i) + " in key template";
      return std::nullopt;
    }
    const std::string_view inner = text.substr(i + 1, close - i - 1);
    if (inner == "path") {
      t.parts_.push_back(Part{Part::kPath, "", 0});
    } else if (inner.size() == 1 && inner[0] >= '1' && inner[0] <= '9') {
      const int index = inner[0] - '0';
      t.parts_.push_back(Part{Part::kCapture, "", index});
      t.max_capture_ = std::max(t.max_capture_, index);
    } else if (inner.starts_with(kHeaderPrefix) && IsToken(inner.substr(kHeaderPrefix.size()))) {
      t.parts_.push_back(Part{Part::kHeader, std::string(inner.substr(kHeaderPrefix.size())), 0});
      t.header_names_.push_back(t.parts_.back().text);
    } else {
      *error = "unknown placeholder '{" + std::string(inner) +
               "}' in key template (use {path}, {1}..{9} or {header:Name})";
      return std::nullopt;
    }
    i = close;
  }
  return t;
}

KeyTemplate::ExpandError KeyTemplate::Expand(std::string_view path,
                                             std::span<const std::string> captures,
                                             const HeaderLookup& headers, std::string* out) const {
  out->clear();
  for (const Part& part : parts_) {
    switch (part.kind) {
      case Part::kLiteral:
        out->append(part.text);
        break;
      case Part::kPath:
        out->append(path);
        break;
      case Part::kCapture:
        if (static_cast<size_t>(part.index) < captures.size()) {
          out->append(captures[static_cast<size_t>(part.index)]);
        }
        break;
      case Part::kHeader: {
        std::optional<std::string_view> value;
        if (headers) value = headers(part.text);
        // An empty value counts as absent: it would silently merge the keys
        // of every client that forgot the header.
        if (!value || value->empty()) return ExpandError::kMissingHeader;
        out->append(*value);
        break;
      }
    }
    if (out->size() > kMaxKeyBytes) return ExpandError::kTooLong;
  }
  if (out->empty()) return ExpandError::kEmpty;
  for (char c : *out) {
    if (IsControl(static_cast<unsigned char>(c))) return ExpandError::kBadByte;
  }
  return ExpandError::kNone;
}

std::unique_ptr<Router> Router::Build(const std::vector<config::RouteConfig>& routes,
                                      std::string* error) {
  auto router = std::make_unique<Router>();
  router->routes_.reserve(routes.size());
  for (size_t i = 0; i < routes.size(); ++i) {
    const config::RouteConfig& rc = routes[i];
    auto fail = [&](const std::string& msg) {
      *error = RouteContext(rc, i) + msg;
      return nullptr;
    };
    Route r;
    r.name = rc.name;
    r.mode = rc.mode;

    if (rc.path_prefix.empty() == rc.path_regex.empty()) {
      return fail("needs exactly one of path_prefix and path_regex");
    }
    r.keep_path_params = rc.keep_path_params;
    r.case_insensitive = rc.case_insensitive;
    if (!rc.path_prefix.empty()) {
      // Matched against decoded canonical paths, so a prefix that is not
      // canonical itself ("/a//b", "/a/./b", "%7e") could never match: refuse
      // it. Its trailing slash (a directory) is kept for matching.
      CanonicalTarget canon;
      const PathError pe = CanonicalizeTarget(rc.path_prefix, &canon);
      if (pe != PathError::kNone) {
        return fail("path_prefix '" + rc.path_prefix + "': " + PathErrorMessage(pe));
      }
      if (canon.has_query || canon.forward != rc.path_prefix) {
        return fail("path_prefix '" + rc.path_prefix + "' is not canonical and would never " +
                    "match; write it as '" + canon.forward + "'");
      }
      r.prefix = canon.path;
      if (canon.trailing_slash) r.prefix.push_back('/');
      if (r.case_insensitive) FoldInto(std::string(r.prefix), &r.prefix);
    } else {
      try {
        r.regex.emplace(rc.path_regex, r.case_insensitive ? kRegexFlags | std::regex::icase
                                                          : kRegexFlags);
      } catch (const std::regex_error& e) {
        return fail("path_regex '" + rc.path_regex + "' is invalid: " + e.what());
      }
    }

    for (const std::string& m : rc.methods) {
      if (!IsToken(m) ||
          std::any_of(m.begin(), m.end(), [](char c) { return c >= 'a' && c <= 'z'; })) {
        return fail("method '" + m + "' must be an upper-case HTTP method name");
      }
    }
    r.methods = rc.methods;

    std::string key_error;
    std::optional<KeyTemplate> key = KeyTemplate::Compile(rc.key, &key_error);
    if (!key) return fail("key '" + rc.key + "': " + key_error);
    const int groups = r.regex ? static_cast<int>(r.regex->mark_count()) : 0;
    if (key->max_capture() > groups) {
      return fail("key '" + rc.key + "' uses {" + std::to_string(key->max_capture()) +
                  "} but the route has only " + std::to_string(groups) + " capture group(s)");
    }
    r.key = std::move(*key);
    if (rc.idempotency) {
      r.idempotency = rc.idempotency;
      if (!rc.idempotency->scope.empty()) {
        std::optional<KeyTemplate> scope =
            KeyTemplate::Compile(rc.idempotency->scope, &key_error);
        if (!scope) return fail("idempotency scope '" + rc.idempotency->scope + "': " + key_error);
        if (scope->max_capture() > groups) {
          return fail("idempotency scope '" + rc.idempotency->scope + "' uses {" +
                      std::to_string(scope->max_capture()) + "} but the route has only " +
                      std::to_string(groups) + " capture group(s)");
        }
        r.idempotency_scope = std::move(*scope);
      }
    }
    r.nesting = rc.nesting;
    if (rc.subtree_methods) {
      r.subtree_methods = *rc.subtree_methods;
    } else {
      r.subtree_methods.assign(std::begin(config::kDefaultSubtreeMethods),
                               std::end(config::kDefaultSubtreeMethods));
    }
    if (r.nesting != config::RouteNesting::kOff && r.mode != config::RouteMode::kOff) {
      std::string top = DirectoryOf(r.regex ? LiteralBeginning(rc.path_regex) : r.prefix);
      if (r.case_insensitive) {
        FoldInto(std::string(top), &top);
        router->fold_uncovered_ = true;
      }
      router->tree_tops_.push_back(std::move(top));
    }
    router->routes_.push_back(std::move(r));
  }
  router->default_subtree_.assign(std::begin(config::kDefaultSubtreeMethods),
                                  std::end(config::kDefaultSubtreeMethods));
  return router;
}

RouteMatch Router::Match(std::span<const std::string_view> methods,
                         std::string_view canonical_path) const {
  RouteMatch m;
  bool folded = false;
  std::string as_directory;  // a regex route's second try
  for (const Route& r : routes_) {
    if (std::none_of(methods.begin(), methods.end(),
                     [&r](std::string_view method) { return r.Covers(method); })) {
      continue;
    }
    std::string_view path = canonical_path;
    if (r.case_insensitive) {
      if (!folded) FoldInto(canonical_path, &m.folded);
      folded = true;
      path = m.folded;
    }
    if (r.regex) {
      // A route covers its root: the path, or the path as a directory
      // ("/tenants/acme" for "^/tenants/([^/]+)/").
      std::match_results<std::string_view::const_iterator> groups;
      std::match_results<std::string::const_iterator> dir_groups;
      if (std::regex_search(path.begin(), path.end(), groups, *r.regex,
                            std::regex_constants::match_continuous)) {
        m.captures.reserve(groups.size());
        for (const auto& g : groups) m.captures.emplace_back(g.matched ? g.str() : std::string());
      } else {
        if (path.ends_with('/')) continue;  // "/" itself
        as_directory.assign(path).push_back('/');
        if (!std::regex_search(as_directory.cbegin(), as_directory.cend(), dir_groups, *r.regex,
                               std::regex_constants::match_continuous)) {
          continue;
        }
        m.captures.reserve(dir_groups.size());
        for (const auto& g : dir_groups) {
          m.captures.emplace_back(g.matched ? g.str() : std::string());
        }
      }
    } else {
      // A route covers its root: "/objects" for "/objects/".
      const bool root = r.prefix.size() == path.size() + 1 && r.prefix.back() == '/' &&
                        r.prefix.starts_with(path);
      if (!path.starts_with(r.prefix) && !root) continue;
      m.captures.emplace_back(r.prefix);
    }
    m.route = &r;
    m.fenced = r.mode != config::RouteMode::kOff;
    return m;
  }
  return m;
}

bool KeysOtherThanPaths(const Route& route) {
  if (route.mode == config::RouteMode::kOff || route.nesting == config::RouteNesting::kOff) {
    return false;
  }
  if (route.key.max_capture() != 0 || !route.key.header_names().empty()) return true;
  std::string probe;
  const auto none = [](std::string_view) -> std::optional<std::string_view> {
    return std::nullopt;
  };
  return route.key.Expand("/probe", {}, none, &probe) != KeyTemplate::ExpandError::kNone ||
         probe != "/probe";
}

std::optional<std::string> TreePathOfKey(const Router& router, std::string_view key) {
  if (key.empty() || key.front() != '/' || !storage::IsTreePath(key)) return std::nullopt;
  // The methods a route may cover: a key written through any of them is
  // the path's own (its subtree writes are the tree's and came with it).
  static constexpr std::array<std::string_view, 3> kMethods = {"PUT", "POST", "PATCH"};
  for (std::string_view method : kMethods) {
    const RouteMatch m = router.Match(method, key);
    if (m.route == nullptr || !m.fenced || m.route->nesting == config::RouteNesting::kOff ||
        KeysOtherThanPaths(*m.route) || m.KeyPath(key) != key) {
      continue;
    }
    return std::string(key);
  }
  return std::nullopt;
}

}  // namespace fencegate::proxy
