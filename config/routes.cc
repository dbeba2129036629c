// The `routes:` list: matching (prefix or regex), methods, key template,
// mode and idempotency (idempotency.cc) of every route, and unique route
// names.

#include "config/routes.h"

#include <algorithm>
#include <map>
#include <optional>
#include <regex>
#include <string>

#include "config/idempotency.h"
#include "config/internal.h"

namespace fencegate::config::internal {
namespace {

// libstdc++'s regex compiler reads a repetition count ({n} or {n,m}) and a
// back-reference (\n) into a signed long without an overflow check: a
// longer run of digits is undefined behaviour before it can refuse the
// regex (fuzz_config found it). Up to 6 digits it refuses a huge count
// cleanly ("Number of NFA states exceeds limit").
constexpr size_t kMaxCountDigits = 6;

size_t DigitsAt(std::string_view text, size_t i) {
  size_t n = 0;
  while (i + n < text.size() && text[i + n] >= '0' && text[i + n] <= '9') ++n;
  return n;
}

// True when `regex` has a repetition count or a back-reference of more
// than kMaxCountDigits digits. An escaped brace (\{) is literal and skipped;
// a brace inside [...] is not told apart, so that case errs on refusing.
bool HasHugeCount(std::string_view regex) {
  for (size_t i = 0; i < regex.size(); ++i) {
    if (regex[i] == '\\') {
      if (DigitsAt(regex, i + 1) > kMaxCountDigits) return true;  // \n
      ++i;  // the escaped character
      continue;
    }
    if (regex[i] != '{') continue;
    const size_t low = DigitsAt(regex, i + 1);
    if (low > kMaxCountDigits) return true;  // {n
    const size_t comma = i + 1 + low;
    if (low > 0 && comma < regex.size() && regex[comma] == ',' &&
        DigitsAt(regex, comma + 1) > kMaxCountDigits) {
      return true;  // {n,m
    }
  }
  return false;
}

using Keys = std::vector<YamlReader::Key>;

constexpr std::string_view kPrefixExpected = "a path prefix starting with '/', e.g. /objects/";
constexpr std::string_view kRegexExpected =
    "an ECMAScript regular expression such as ^/tenants/([^/]+)/";
constexpr std::string_view kMethodsExpected =
    "a non-empty list of distinct HTTP methods such as [PUT, POST, PATCH, DELETE] (leave it "
    "out to fence every method but GET, HEAD, OPTIONS and TRACE)";

// A listed method that is not in the IANA registry (kKnownMethods) but one
// edit away from one ("PUTT", "DELTE", "PSOT") is refused as a likely typo:
// a misspelt method would silently leave the real one unfenced.
// The known method `method` is likely a typo of, or "".
std::string_view TypoOf(std::string_view method) {
  if (std::find(std::begin(kKnownMethods), std::end(kKnownMethods), method) !=
      std::end(kKnownMethods)) {
    return {};
  }
  for (std::string_view known : kKnownMethods) {
    if (EditDistance(method, known) == 1) return known;
  }
  return {};
}
constexpr std::string_view kKeyExpected =
    "literal text with {path}, {1}..{9} (regex captures) or {header:Name}";

bool HasControl(std::string_view text) {
  return std::any_of(text.begin(), text.end(), [](char c) {
    auto byte = static_cast<unsigned char>(c);
    return byte < 0x20 || byte == 0x7f;
  });
}

constexpr std::string_view kSubtreeMethodsExpected =
    "a list of the methods whose write may change every path below its own, such as "
    "[DELETE, COPY, MOVE, PUT, LOCK] (the default; for COPY only its Destination), in which "
    "any other method changes its own path only, except a method fencegate does not know, "
    "which is always a subtree write; [] for none";

bool IsSafe(std::string_view method) {
  return method == "GET" || method == "HEAD" || method == "OPTIONS" || method == "TRACE";
}

// `methods:` (expected = kMethodsExpected, at least one) or
// `subtree_methods:` (kSubtreeMethodsExpected: may be empty, no method that
// does not write).
bool ReadMethods(YamlReader& r, const Field& f, std::vector<std::string>* out,
                 std::string_view expected = kMethodsExpected) {
  const bool subtree = expected == kSubtreeMethodsExpected;
  std::vector<std::string> methods;
  bool ok = r.Sequence(f, expected, [&](const Field& item) {
    std::string method;
    if (!r.NonEmptyString(item, expected, &method)) return false;
    if (!IsHttpToken(method)) {
      return r.Fail(item, "'" + method + "' is not a method name", expected);
    }
    std::transform(method.begin(), method.end(), method.begin(),
                   [](char c) { return (c >= 'a' && c <= 'z') ? static_cast<char>(c - 32) : c; });
    if (std::string_view known = TypoOf(method); !known.empty()) {
      return r.Fail(item,
                    "'" + method + "' is not a known HTTP method; did you mean " +
                        std::string(known) + "?",
                    expected);
    }
    if (std::find(methods.begin(), methods.end(), method) != methods.end()) {
      return r.Fail(item, "'" + method + "' is listed twice", expected);
    }
    if (subtree && IsSafe(method)) {
      return r.Fail(item, "'" + method + "' does not write", expected);
    }
    methods.push_back(std::move(method));
    return true;
  });
  if (!ok) return false;
  if (methods.empty() && !subtree) return r.Fail(f, "is an empty list", expected);
  *out = std::move(methods);
  return true;
}

// Reads routes[index]; *name_line is the line of its name (of the route
// itself when the name is the default).
bool ReadRoute(YamlReader& r, const Field& f, size_t index, RouteConfig* route, int* name_line) {
  route->name = "route-" + std::to_string(index);
  route->line = f.line;
  *name_line = f.line;
  std::optional<Field> prefix_field;
  std::optional<Field> regex_field;
  std::optional<Field> key_field;
  std::optional<Field> scope_field;  // routes[i].idempotency.scope
  unsigned capture_count = 0;

  bool ok = r.Map(f, Keys{
      {"name", [&](const Field& v) {
         *name_line = v.line;
         if (!r.NonEmptyString(v, "a route name such as objects", &route->name)) return false;
         if (HasControl(route->name)) {
           return r.Fail(v, "contains a control character", "a printable route name");
         }
         return true;
       }},
      {"path_prefix", [&](const Field& v) {
         prefix_field = v;
         if (!r.NonEmptyString(v, kPrefixExpected, &route->path_prefix)) return false;
         if (route->path_prefix.front() != '/') {
           return r.Fail(v, "'" + route->path_prefix + "' does not start with '/'",
                         kPrefixExpected);
         }
         return true;
       }},
      {"path_regex", [&](const Field& v) {
         regex_field = v;
         if (!r.NonEmptyString(v, kRegexExpected, &route->path_regex)) return false;
         // A repetition count libstdc++ would overflow while compiling
         // (undefined behaviour there; fuzz_config's corpus holds such
         // patterns): refused first.
         if (HasHugeCount(route->path_regex)) {
           return r.Fail(v, "'" + route->path_regex +
                                "' has a repetition count or back-reference of more "
                                "than 6 digits",
                         kRegexExpected);
         }
         try {
           std::regex compiled(route->path_regex, std::regex::ECMAScript);
           capture_count = compiled.mark_count();
         } catch (const std::regex_error& e) {
           return r.Fail(v, "'" + route->path_regex + "' is not a valid regex: " + e.what(),
                         kRegexExpected);
         }
         return true;
       }},
      {"methods", [&](const Field& v) { return ReadMethods(r, v, &route->methods); }},
      {"key", [&](const Field& v) {
         key_field = v;
         return r.String(v, &route->key);
       }},
      {"mode", [&](const Field& v) {
         std::string mode;
         if (!r.Choice(v, {"enforce", "shadow", "off"}, &mode)) return false;
         route->mode = mode == "enforce" ? RouteMode::kEnforce
                       : mode == "shadow" ? RouteMode::kShadow
                                          : RouteMode::kOff;
         return true;
       }},
      {"path_params", [&](const Field& v) {
         std::string choice;
         if (!r.Choice(v, {"refuse", "keep"}, &choice)) return false;
         route->keep_path_params = choice == "keep";
         return true;
       }},
      {"case_insensitive", [&](const Field& v) { return r.Bool(v, &route->case_insensitive); }},
      {"nesting", [&](const Field& v) {
         std::string nesting;
         if (!r.Choice(v, {"per_key", "shared", "off"}, &nesting)) return false;
         route->nesting = nesting == "per_key" ? RouteNesting::kPerKey
                          : nesting == "shared" ? RouteNesting::kShared
                                                : RouteNesting::kOff;
         return true;
       }},
      {"subtree_methods", [&](const Field& v) {
         return ReadMethods(r, v, &route->subtree_methods.emplace(), kSubtreeMethodsExpected);
       }},
      {"idempotency", [&](const Field& v) {
         return ReadIdempotency(r, v, &route->idempotency, &scope_field);
       }},
  });
  if (!ok) return false;

  if (prefix_field && regex_field) {
    return r.Fail(*regex_field,
                  "conflicts with path_prefix on line " + std::to_string(prefix_field->line),
                  "exactly one of path_prefix or path_regex");
  }
  if (!prefix_field && !regex_field) {
    return r.Fail(f, "has neither path_prefix nor path_regex",
                  "exactly one of path_prefix or path_regex");
  }
  // The key and the idempotency scope are templates of one grammar, with
  // the route's regex groups.
  auto check_template = [&](const std::string& text, const Field& where) {
    std::string problem = ValidateKeyTemplate(text, capture_count, regex_field.has_value());
    return problem.empty() || r.Fail(where, "'" + text + "' " + problem, kKeyExpected);
  };
  if (!check_template(route->key, key_field ? *key_field : f.Child(f.node, "key", f.line))) {
    return false;
  }
  // An empty scope is the default: keys are not scoped.
  if (route->idempotency && !route->idempotency->scope.empty() && scope_field) {
    return check_template(route->idempotency->scope, *scope_field);
  }
  return true;
}

}  // namespace

bool ReadRoutes(YamlReader& r, const Field& field, std::vector<RouteConfig>* routes) {
  std::vector<RouteConfig> result;
  std::map<std::string, size_t> index_by_name;
  bool ok = r.Sequence(field, "a list of routes (write [] for none)", [&](const Field& item) {
    size_t index = result.size();
    RouteConfig route;
    int name_line = 0;
    if (!ReadRoute(r, item, index, &route, &name_line)) return false;
    auto [it, inserted] = index_by_name.emplace(route.name, index);
    if (!inserted) {
      const RouteConfig& first = result[it->second];
      return r.Fail(item.Child(item.node, "name", name_line),
                    "'" + route.name + "' is already the name of routes[" +
                        std::to_string(it->second) + "] on line " + std::to_string(first.line),
                    "a unique name per route");
    }
    result.push_back(std::move(route));
    return true;
  });
  if (!ok) return false;
  *routes = std::move(result);
  return true;
}

}  // namespace fencegate::config::internal
