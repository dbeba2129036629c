#pragma once
// `fencegate route`: what fencegate would do with one request, computed by
// the same functions the data plane runs (CheckHead, Classify), without
// starting anything. Operators check their routes with it; tests use it to
// see the keys a spelling is fenced under.

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"
#include "fence/router.h"

namespace fencegate::proxy {

// The request to explain: a method, a request target as it would be sent,
// and header fields ("Host" defaults to "localhost").
struct ExplainRequest {
  std::string method;
  std::string target;
  std::vector<std::pair<std::string, std::string>> headers;
};

// One JSON object: "verdict" is "fenced" (a write that needs its token;
// "keys" lists every key it is fenced under), "pass_through" (forwarded
// unfenced) or "refused" ("status", "error" and "message" as the client
// would get them); plus "route" and "mode" (null when no route matched),
// "canonical_path", "forward" (the request line's target upstream) and,
// for a COPY or MOVE, "destination" (the Destination forwarded).
nlohmann::json ExplainRoute(const config::Config& config, const Router& router,
                            const ExplainRequest& request);

// The same as lines of text for a terminal.
std::string FormatExplanation(const nlohmann::json& explanation);

// Parses a -H argument "Name: value"; false when it has no ':' or the name
// is empty.
bool ParseHeaderArgument(std::string_view text, std::pair<std::string, std::string>* out);

}  // namespace fencegate::proxy
