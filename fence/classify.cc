#include "fence/classify.h"

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/rfc7230.hpp>
#include <boost/container/small_vector.hpp>
#include <algorithm>
#include <array>
#include <span>

#include "fence/tchar.h"
#include "fence/token.h"

namespace fencegate::proxy {

namespace {

const char* KeyErrorMessage(KeyTemplate::ExpandError e) {
  switch (e) {
    case KeyTemplate::ExpandError::kMissingHeader:
      return "the route's key template names a header that the request does not carry "
             "exactly once";
    case KeyTemplate::ExpandError::kEmpty:
      return "the key expands to an empty string";
    case KeyTemplate::ExpandError::kTooLong:
      return "the key is longer than 1024 bytes";
    case KeyTemplate::ExpandError::kBadByte:
      return "the key contains a control character";
    case KeyTemplate::ExpandError::kNone:
      break;
  }
  return "bad key";
}

// Fills intent->idempotency for a write on `route` (which has
// `idempotency:`), or rejects it; false when rejected.
template <class Reject>
bool ReadIdempotencyKey(const Route& route, const RouteMatch& match,
                        std::string_view canonical_path, const boost::beast::http::fields& headers,
                        Reject& reject, WriteIntent* intent) {
  const config::IdempotencyConfig& idem = *route.idempotency;
  auto range = headers.equal_range(idem.header);
  if (range.first == range.second) {
    if (!idem.required) return true;
    reject("idempotency_key_required",
           "this route runs each write once per idempotency key: send one in the " + idem.header +
               " header");
    return false;
  }
  if (std::next(range.first) != range.second) {
    reject("bad_idempotency_key", idem.header + " is sent more than once");
    return false;
  }
  std::string_view key = range.first->value();
  if (!IsValidIdempotencyKey(key)) {
    reject("bad_idempotency_key",
           idem.header + " must be 1 to " + std::to_string(kMaxIdempotencyKeyBytes) +
               " visible ASCII characters");
    return false;
  }
  IdempotentRequest& out = intent->idempotency;
  out.scope.clear();
  if (route.idempotency_scope) {
    auto lookup = [&headers](std::string_view name) -> std::optional<std::string_view> {
      auto r = headers.equal_range(name);
      if (r.first == r.second || std::next(r.first) != r.second) return std::nullopt;
      return r.first->value();
    };
    auto error = route.idempotency_scope->Expand(match.KeyPath(canonical_path), match.captures,
                                                 lookup, &out.scope);
    if (error != KeyTemplate::ExpandError::kNone) {
      reject("bad_idempotency_key",
             std::string("the route's idempotency scope: ") + KeyErrorMessage(error));
      return false;
    }
  }
  out.config = &idem;
  out.route = route.name;
  out.client_key.assign(key);
  out.record_key = IdempotencyRecordKey(out.route, out.scope, out.client_key);
  return true;
}

}  // namespace

namespace {

using boost::beast::iequals;

constexpr std::string_view kOverrideHeaders[] = {"X-HTTP-Method-Override", "X-HTTP-Method",
                                                 "X-Method-Override"};

bool IsMethodToken(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(),
                                   [](char c) { return IsTchar(static_cast<unsigned char>(c)); });
}

std::string_view TrimOws(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool HasNonAscii(std::string_view s) {
  return std::any_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) >= 0x80; });
}

// What one pass over the head's fields finds for classification. Views into
// the fields.
struct HeadFacts {
  // The request's method, then every method an override header names.
  boost::container::small_vector<std::string_view, 2> methods;
  std::string_view bad_override;  // an override element that is not a method
  std::string_view bad_override_header;
  size_t destinations = 0;
  std::string_view destination;
  bool has_connection = false;
  // The token header's values, up to two: as many as ParseTokenHeaders
  // needs to tell "more than one".
  std::array<std::string_view, 2> tokens;
  size_t n_tokens = 0;
};

// One pass over the head's few fields, comparing a name only when its
// length matches: cheaper than the fields' ordered lookups (equal_range
// compares case-insensitively along the tree), and it sees a name's values
// in the order they came.
void ReadHead(std::string_view method, std::string_view token_header,
              const boost::beast::http::fields& headers, HeadFacts* facts) {
  facts->methods.push_back(method);
  for (const auto& field : headers) {
    const std::string_view name = field.name_string();
    if (name.size() == token_header.size() && iequals(name, token_header)) {
      if (facts->n_tokens < facts->tokens.size()) facts->tokens[facts->n_tokens++] = field.value();
      continue;
    }
    if (field.name() == http::field::connection) {
      facts->has_connection = true;
      continue;
    }
    if (name.size() == 11 && iequals(name, "Destination")) {
      ++facts->destinations;
      facts->destination = field.value();
      continue;
    }
    if (name.size() < 13 || (name[0] != 'X' && name[0] != 'x')) continue;
    for (std::string_view header : kOverrideHeaders) {
      if (name.size() != header.size() || !iequals(name, header)) continue;
      std::string_view rest = field.value();
      for (;;) {
        const size_t comma = rest.find(',');
        const std::string_view element = TrimOws(rest.substr(0, comma));
        if (!element.empty() && !IsMethodToken(element) && facts->bad_override.empty()) {
          facts->bad_override = element;
          facts->bad_override_header = header;
        } else if (!element.empty()) {
          facts->methods.push_back(element);
        }
        if (comma == std::string_view::npos) break;
        rest.remove_prefix(comma + 1);
      }
    }
  }
}

// How a target takes part in the tree: a route's (per_key or shared), none
// (a flat route, a route off, or a write outside every route that cannot
// reach a fenced path), or uncovered.
struct TreePart {
  bool in_tree = false;
  storage::Nesting nesting = storage::Nesting::kPerKey;
  bool subtree = false;
  std::string path;  // as the tree keeps it (folded where matched so)
};

// `destination`: the target is a COPY's or MOVE's Destination (which only
// those two methods write); otherwise the request's own path, which a COPY
// leaves as it was (its Destination is the subtree target).
TreePart TreePartOf(const Router& router, const RouteMatch& match, std::string_view path,
                    std::span<const std::string_view> methods, bool destination) {
  TreePart part;
  const Route* route = match.route;
  auto subtree = [&](std::string_view m) {
    const bool copy = EqualsIgnoringCase(m, "COPY");
    const bool move = EqualsIgnoringCase(m, "MOVE");
    // A Destination is written by COPY and MOVE only; COPY leaves its
    // source as it was.
    if (destination ? !(copy || move) : copy) return false;
    return route != nullptr ? route->Subtree(m)
                            : IsSubtreeMethod(router.default_subtree_methods(), m);
  };
  part.subtree = std::any_of(methods.begin(), methods.end(),
                             [&](std::string_view m) { return !IsSafeMethod(m) && subtree(m); });
  if (route != nullptr) {
    if (!match.fenced || route->nesting == config::RouteNesting::kOff) return part;
    part.in_tree = true;
    part.nesting = route->nesting == config::RouteNesting::kShared ? storage::Nesting::kShared
                                                                   : storage::Nesting::kPerKey;
    part.path = std::string(match.KeyPath(path));
    return part;
  }
  if (!part.subtree || !router.TreeMayHoldBelow(path)) return part;
  part.in_tree = true;
  part.nesting = storage::Nesting::kUncovered;
  part.path = std::string(path);
  if (router.fold_uncovered()) {
    for (char& c : part.path) {
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    }
  }
  return part;
}

bool AnyCopyOrMove(std::span<const std::string_view> methods) {
  return std::any_of(methods.begin(), methods.end(), [](std::string_view m) {
    return EqualsIgnoringCase(m, "COPY") || EqualsIgnoringCase(m, "MOVE");
  });
}

// The checks a path gets once its route is known: "" when it passes, else
// the 400 bad_path message.
std::string PathProblem(std::string_view path, const RouteMatch& match, bool may_write,
                        std::string_view what) {
  if (!may_write) return {};
  if (path.find(';') != std::string_view::npos &&
      !(match.route != nullptr && match.route->keep_path_params)) {
    return std::string(what) +
           " has a ';' (path parameters), which servlet containers strip before they look the "
           "resource up; a route whose backend uses them sets path_params: keep";
  }
  if (match.route != nullptr && match.fenced && match.route->case_insensitive &&
      HasNonAscii(path)) {
    return std::string(what) + " has non-ASCII characters, which route '" + match.route->name +
           "' (case_insensitive) cannot fold into one key";
  }
  return {};
}

// Whether a Connection header nominates `name` (which would make it
// hop-by-hop: dropped before the backend, which must see it).
bool Nominated(const boost::beast::http::fields& headers, std::string_view name) {
  for (auto it = headers.find(http::field::connection);
       it != headers.end() && it->name() == http::field::connection; ++it) {
    for (auto token : http::token_list{it->value()}) {
      if (iequals(token, name)) return true;
    }
  }
  return false;
}

// "" when every header the route's key names is present once with one
// value, else what is wrong.
std::string KeyHeaderProblem(const Route& route, const boost::beast::http::fields& headers) {
  for (const std::string& name : route.key.header_names()) {
    auto range = headers.equal_range(name);
    if (range.first == range.second) continue;  // absent: Expand says so
    if (std::next(range.first) != range.second) {
      return "the key header " + name + " is sent more than once";
    }
    if (range.first->value().find(',') != std::string_view::npos) {
      return "the key header " + name + " holds a list (a comma): a key is one value";
    }
  }
  return {};
}

}  // namespace

void Classify(const FenceSettings& settings, const Router& router, std::string_view method,
              std::string_view canonical_path, const boost::beast::http::fields& headers,
              WriteIntent* out) {
  // A fresh intent, but for the key's buffer, which it keeps.
  std::string key = std::move(out->key);
  key.clear();
  *out = WriteIntent{};
  out->key = std::move(key);
  WriteIntent& intent = *out;
  auto reject = [&intent](std::string_view code, const std::string& message,
                          const nlohmann::json& extra = nlohmann::json::object()) {
    intent.kind = WriteIntent::Kind::kReject;
    intent.outcome = "bad_request";
    intent.reply = MakeError(http::status::bad_request, code, message, extra);
    intent.key.clear();
    intent.extra_keys.clear();
    intent.targets.clear();
  };

  HeadFacts facts;
  ReadHead(method, settings.token_header, headers, &facts);
  if (!facts.bad_override.empty()) {
    return reject("bad_request", std::string(facts.bad_override_header) + ": '" +
                                     std::string(facts.bad_override) + "' is not a method name");
  }
  const std::span<const std::string_view> methods(facts.methods.data(), facts.methods.size());
  const bool may_write = std::any_of(methods.begin(), methods.end(),
                                     [](std::string_view m) { return !IsSafeMethod(m); });

  RouteMatch match = router.Match(methods, canonical_path);
  intent.route = match.route;
  if (std::string problem = PathProblem(canonical_path, match, may_write, "the path");
      !problem.empty()) {
    return reject("bad_path", problem);
  }

  // COPY and MOVE also write the resource their Destination names.
  RouteMatch dest_match;
  std::string_view dest_path;
  if (facts.destinations > 0 && AnyCopyOrMove(methods)) {
    if (facts.destinations > 1) return reject("bad_request", "more than one Destination header");
    CanonicalDestination dest;
    if (PathError e = CanonicalizeDestination(facts.destination, &dest); e != PathError::kNone) {
      return reject("bad_path", std::string("Destination: ") + PathErrorMessage(e));
    }
    intent.destination = std::move(dest);
    dest_path = intent.destination->target.path;
    dest_match = router.Match(methods, dest_path);
    if (std::string problem = PathProblem(dest_path, dest_match, may_write, "the Destination");
        !problem.empty()) {
      return reject("bad_path", problem);
    }
  }
  // Idempotency keys, in every mode of the route (they are not the fence).
  if (match.route != nullptr && match.route->idempotency && may_write &&
      !ReadIdempotencyKey(*match.route, match, canonical_path, headers, reject, &intent)) {
    return;
  }
  const bool source_fenced = match.route != nullptr && match.fenced;
  const bool dest_fenced = dest_match.route != nullptr && dest_match.fenced;
  // The tree: what each target is in it (docs/contract.md, "Nested
  // resources"); its keys are added once they are known.
  TreePart source_part;
  TreePart dest_part;
  if (may_write) {
    source_part = TreePartOf(router, match, canonical_path, methods, /*destination=*/false);
    if (intent.destination) {
      dest_part = TreePartOf(router, dest_match, dest_path, methods, /*destination=*/true);
    }
    for (const TreePart* part : {&source_part, &dest_part}) {
      if (part->in_tree && storage::TreeDepth(part->path) > storage::kMaxTreeDepth) {
        return reject("bad_path", std::string(part == &source_part ? "the path" : "the Destination") +
                                      " has more than " + std::to_string(storage::kMaxTreeDepth) +
                                      " segments");
      }
    }
    if (source_part.in_tree && dest_part.in_tree && source_part.path == dest_part.path) {
      // A COPY or MOVE onto itself: one target, a subtree one if either is.
      source_part.subtree = source_part.subtree || dest_part.subtree;
      dest_part.in_tree = false;
    }
  }
  auto add_target = [&intent](TreePart& part, const std::string& key) {
    if (!part.in_tree) return;
    intent.targets.push_back(storage::TreeTarget{std::move(part.path), key, part.subtree,
                                                 part.nesting});
  };
  if (!source_fenced && !dest_fenced) {
    intent.outcome = "forwarded";
    if (source_part.in_tree || dest_part.in_tree) {
      // Outside every route, over paths a route may have fenced: the store
      // decides it, with no key and no token.
      add_target(source_part, {});
      add_target(dest_part, {});
      intent.kind = WriteIntent::Kind::kFence;
    }
    return;
  }
  if (!source_fenced) intent.route = dest_match.route;
  intent.shadow = (!source_fenced || match.route->mode == config::RouteMode::kShadow) &&
                  (!dest_fenced || dest_match.route->mode == config::RouteMode::kShadow);

  // Headers the fence depends on must reach the backend as they were read.
  if (facts.has_connection && Nominated(headers, settings.token_header)) {
    return reject("bad_token", "the Connection header nominates " + settings.token_header +
                                   ", which would keep it from the backend");
  }
  for (const RouteMatch* m : {&match, &dest_match}) {
    if (m->route == nullptr || !m->fenced) continue;
    for (const std::string& name : m->route->key.header_names()) {
      if (facts.has_connection && Nominated(headers, name)) {
        return reject("bad_key", "the Connection header nominates " + name +
                                     ", a header the key is made from");
      }
    }
    if (std::string problem = KeyHeaderProblem(*m->route, headers); !problem.empty()) {
      return reject("bad_key", problem);
    }
  }

  // The key is derived before the token is checked, so that even a 428 can
  // name the key.
  // A header sent twice cannot name one key: treat it as absent (400 bad_key).
  auto lookup = [&headers](std::string_view name) -> std::optional<std::string_view> {
    auto range = headers.equal_range(name);
    if (range.first == range.second || std::next(range.first) != range.second) {
      return std::nullopt;
    }
    return range.first->value();
  };
  auto expand = [&](const RouteMatch& m, std::string_view path, std::string* key) {
    auto key_error = m.route->key.Expand(m.KeyPath(path), m.captures, lookup, key);
    if (key_error == KeyTemplate::ExpandError::kNone) return true;
    reject("bad_key", KeyErrorMessage(key_error), {{"route", m.route->name}});
    return false;
  };
  if (source_fenced && !expand(match, canonical_path, &intent.key)) return;
  std::string dest_key;
  if (dest_fenced) {
    if (!expand(dest_match, dest_path, &dest_key)) return;
    if (!source_fenced) {
      intent.key = dest_key;
    } else if (dest_key != intent.key) {
      intent.extra_keys.push_back(dest_key);
    }
  }
  add_target(source_part, source_part.nesting == storage::Nesting::kUncovered ? std::string()
                                                                              : intent.key);
  add_target(dest_part, dest_part.nesting == storage::Nesting::kUncovered ? std::string()
                                                                          : dest_key);

  // The token (its values were read with the head's other fields).
  TokenParse token = ParseTokenHeaders(std::span(facts.tokens.data(), facts.n_tokens));
  if (token.status == TokenStatus::kMissing) {
    intent.outcome = "token_required";
    intent.reply = MakeError(http::status::precondition_required, "token_required",
                             "this route is fenced: send the lock's fencing token in the " +
                                 settings.token_header + " header",
                             {{"key", intent.key}});
  } else if (token.status == TokenStatus::kMalformed) {
    intent.outcome = "bad_request";
    intent.reply = MakeError(http::status::bad_request, "bad_token",
                             settings.token_header + ": " + token.reason);
  } else {
    intent.kind = WriteIntent::Kind::kFence;
    intent.token = token.value;
    intent.outcome = "forwarded";
    return;
  }
  if (intent.shadow) {
    // Shadow mode never refuses: forward unfenced, remember what would have happened.
    intent.shadow_violation = intent.outcome;
    intent.kind = WriteIntent::Kind::kPassThrough;
    intent.outcome = "forwarded";
    intent.reply.reset();
    intent.targets.clear();
    return;
  }
  intent.kind = WriteIntent::Kind::kReject;
}

WriteIntent Classify(const FenceSettings& settings, const Router& router,
                     std::string_view method, std::string_view canonical_path,
                     const boost::beast::http::fields& headers) {
  WriteIntent intent;
  Classify(settings, router, method, canonical_path, headers, &intent);
  return intent;
}

}  // namespace fencegate::proxy
