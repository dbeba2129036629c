#include "app/route_explain.h"

#include <boost/beast/http/message.hpp>

#include "fence/classify.h"
#include "fence/request_checks.h"

namespace fencegate::proxy {

namespace http = boost::beast::http;

namespace {

std::string_view ModeName(config::RouteMode mode) {
  switch (mode) {
    case config::RouteMode::kEnforce:
      return "enforce";
    case config::RouteMode::kShadow:
      return "shadow";
    case config::RouteMode::kOff:
      return "off";
  }
  return "?";
}

void Refused(const Reply& reply, nlohmann::json* out) {
  (*out)["verdict"] = "refused";
  (*out)["status"] = reply.result_int();
  nlohmann::json body = nlohmann::json::parse(reply.body(), nullptr, false);
  if (body.is_object()) {
    (*out)["error"] = body.value("error", "");
    (*out)["message"] = body.value("message", "");
  }
}

}  // namespace

bool ParseHeaderArgument(std::string_view text, std::pair<std::string, std::string>* out) {
  const size_t colon = text.find(':');
  if (colon == std::string_view::npos || colon == 0) return false;
  std::string_view value = text.substr(colon + 1);
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  *out = {std::string(text.substr(0, colon)), std::string(value)};
  return true;
}

nlohmann::json ExplainRoute(const config::Config& config, const Router& router,
                            const ExplainRequest& request) {
  nlohmann::json out = {{"method", request.method}, {"target", request.target},
                        {"route", nullptr},         {"mode", nullptr}};
  http::request_header<> req;
  req.version(11);
  req.method_string(request.method);
  req.target(request.target);
  bool has_host = false;
  for (const auto& [name, value] : request.headers) {
    req.insert(name, value);
    has_host = has_host || boost::beast::iequals(name, "Host");
  }
  if (!has_host) req.set(http::field::host, "localhost");

  CanonicalTarget target;
  if (HeadProblem problem = CheckHead(req, &target); !problem.ok()) {
    out["verdict"] = "refused";
    out["status"] = 400;
    out["error"] = problem.code;
    out["message"] = problem.message;
    return out;
  }
  out["canonical_path"] = target.path;
  out["forward"] = config.upstream.base_path + target.forward +
                   (target.has_query ? "?" + target.query : std::string());

  FenceSettings settings;
  settings.token_header = config.fencing.token_header;
  WriteIntent intent;
  Classify(settings, router, request.method, target.path, req, &intent);
  if (intent.route != nullptr) {
    out["route"] = intent.route->name;
    out["mode"] = ModeName(intent.route->mode);
  }
  if (intent.destination) {
    out["destination"] =
        intent.destination->origin + config.upstream.base_path + intent.destination->target.forward;
  }
  if (intent.idempotency.on() && intent.kind != WriteIntent::Kind::kReject) {
    out["idempotency"] = {
        {"key", intent.idempotency.client_key},
        {"window_ms", intent.idempotency.config->window.count()},
        {"scoped", !intent.idempotency.scope.empty()}};
  }
  nlohmann::json keys = nlohmann::json::array();
  if (!intent.key.empty()) keys.push_back(intent.key);
  for (const std::string& k : intent.extra_keys) keys.push_back(k);
  // The tree of paths: each target, whether it is a subtree target, and the
  // nesting mode it is decided under (docs/contract.md, "Nested resources").
  if (!intent.targets.empty()) {
    nlohmann::json targets = nlohmann::json::array();
    for (const storage::TreeTarget& t : intent.targets) {
      targets.push_back({{"path", t.path},
                         {"subtree", t.subtree},
                         {"nesting", t.nesting == storage::Nesting::kShared   ? "shared"
                                     : t.nesting == storage::Nesting::kPerKey ? "per_key"
                                                                              : "uncovered"},
                         {"key", t.key.empty() ? nlohmann::json(nullptr) : nlohmann::json(t.key)}});
    }
    out["tree"] = std::move(targets);
  }

  switch (intent.kind) {
    case WriteIntent::Kind::kFence:
      out["verdict"] = "fenced";
      out["keys"] = keys;
      out["token"] = intent.token;
      break;
    case WriteIntent::Kind::kPassThrough:
      out["verdict"] = "pass_through";
      if (!intent.shadow_violation.empty()) {
        // Shadow mode: forwarded, but enforce would have refused it.
        out["keys"] = keys;
        out["shadow_violation"] = intent.shadow_violation;
      }
      break;
    case WriteIntent::Kind::kReject:
      if (intent.outcome == "token_required") {
        // The keys are known; only the token is missing.
        out["verdict"] = "fenced";
        out["keys"] = keys;
        out["token"] = nullptr;
      } else {
        Refused(*intent.reply, &out);
      }
      break;
  }
  return out;
}

namespace {

// A window as a configuration writes it: 24h, 90m, 30s, 250ms.
std::string WindowText(int64_t ms) {
  if (ms % 3'600'000 == 0) return std::to_string(ms / 3'600'000) + "h";
  if (ms % 60'000 == 0) return std::to_string(ms / 60'000) + "m";
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + "s";
  return std::to_string(ms) + "ms";
}

}  // namespace

std::string FormatExplanation(const nlohmann::json& e) {
  std::string s;
  auto line = [&s](std::string_view label, const std::string& value) {
    s.append(label).append(value).push_back('\n');
  };
  line("request:        ", e["method"].get<std::string>() + " " + e["target"].get<std::string>());
  if (e.contains("canonical_path")) {
    line("canonical path: ", e["canonical_path"].get<std::string>());
    line("forwarded as:   ", e["method"].get<std::string>() + " " + e["forward"].get<std::string>());
  }
  if (e.contains("destination")) line("destination:    ", e["destination"].get<std::string>());
  line("route:          ", e["route"].is_null() ? std::string("none")
                                                : e["route"].get<std::string>() + " (mode " +
                                                      e["mode"].get<std::string>() + ")");
  const std::string verdict = e["verdict"];
  if (verdict == "refused") {
    line("verdict:        ", "refused, " + std::to_string(e["status"].get<int>()) + " " +
                                 e.value("error", "") + ": " + e.value("message", ""));
    return s;
  }
  if (e.contains("keys")) {
    bool first = true;
    for (const auto& k : e["keys"]) {
      line(first ? "keys:           " : "                ", k.get<std::string>());
      first = false;
    }
  }
  if (e.contains("tree")) {
    bool first = true;
    for (const auto& t : e["tree"]) {
      const std::string nesting = t["nesting"];
      std::string what = t["path"].get<std::string>() +
                         (t["subtree"].get<bool>() ? " (subtree write" : " (this path only");
      what += nesting == "uncovered" ? ", outside every route)" : ", nesting " + nesting + ")";
      line(first ? "tree:           " : "                ", what);
      first = false;
    }
  }
  if (e.contains("idempotency")) {
    const auto& idem = e["idempotency"];
    line("idempotency:    ",
         "key " + idem["key"].get<std::string>() + (idem["scoped"].get<bool>() ? ", scoped" : "") +
             ": runs once; a repeat within " + WindowText(idem["window_ms"].get<int64_t>()) +
             " gets the first response");
  }
  if (verdict == "fenced" && e.contains("keys") && e["keys"].empty()) {
    line("verdict:        ", "decided by the tree of paths, with no token");
  } else if (verdict == "fenced") {
    line("verdict:        ", e["token"].is_null()
                                 ? std::string("fenced: a write without a token gets 428")
                                 : "fenced with token " + std::to_string(e["token"].get<uint64_t>()));
  } else if (e.contains("shadow_violation")) {
    line("verdict:        ", "passed through (shadow mode; enforce would refuse: " +
                                 e["shadow_violation"].get<std::string>() + ")");
  } else {
    line("verdict:        ", "passed through, not fenced");
  }
  return s;
}

}  // namespace fencegate::proxy
