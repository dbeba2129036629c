// Fuzz target: the YAML config loader (docs/contract.md, "Configuration"), as
// `fencegate --config FILE --check` runs it: LoadFromString, then the
// router build that main() does on what the loader accepted; on success a
// few requests are routed through it (fuzzer-chosen regexes and templates
// against fixed paths).
//
// Invariants checked (a violation traps):
//  - Load never lets an exception out, and an error is never the catch-all
//    "internal error" (every problem is reported as such by the reader);
//  - every error message starts with the file name;
//  - loading the same text twice gives equal configs (no hidden state);
//  - an accepted config has its derived fields (endpoint, upstream host
//    and port, route names and methods) filled in.

#include <boost/beast/http/fields.hpp>
#include <memory>
#include <string>
#include <variant>

#include "config/config.h"
#include "fence/classify.h"
#include "fence/router.h"
#include "tests/fuzz/fuzz_util.h"

namespace fencegate::fuzz {
namespace {

constexpr std::string_view kName = "fuzz.yaml";

void Route(const config::Config& c) {
  std::string error;
  std::unique_ptr<proxy::Router> router = proxy::Router::Build(c.routes, &error);
  if (!router) {
    // main() reports this as a config error too (e.g. a back-reference,
    // which only the router's linear-time regex engine refuses).
    FUZZ_CHECK(!error.empty());
    return;
  }
  proxy::FenceSettings settings;
  settings.token_header = c.fencing.token_header;
  boost::beast::http::fields headers;
  headers.set(c.fencing.token_header, "42");
  headers.set("X-Tenant", "t1");
  for (std::string_view path : {"/", "/objects/a", "/tenants/t1/doc", "/a/b/c/"}) {
    for (std::string_view method : {"PUT", "GET"}) {
      proxy::WriteIntent intent = proxy::Classify(settings, *router, method, path, headers);
      if (intent.kind == proxy::WriteIntent::Kind::kFence) {
        // A key, or a subtree write outside every route, decided by the
        // tree of paths with none.
        FUZZ_CHECK(intent.key.size() <= proxy::kMaxKeyBytes);
        FUZZ_CHECK(!intent.key.empty() || !intent.targets.empty());
      }
    }
  }
}

}  // namespace
}  // namespace fencegate::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fencegate;
  using fuzz::kName;
  const std::string_view yaml = fuzz::AsText(data, size);
  config::LoadResult result = config::LoadFromString(yaml, kName);
  if (auto* error = std::get_if<config::ConfigError>(&result)) {
    FUZZ_CHECK(std::string_view(error->message).starts_with(kName));
    const std::string_view after_name = std::string_view(error->message).substr(kName.size());
    FUZZ_CHECK(!after_name.starts_with(": internal error"));
    return 0;
  }
  const config::Config& c = std::get<config::Config>(result);
  config::LoadResult again = config::LoadFromString(yaml, kName);
  FUZZ_CHECK(std::holds_alternative<config::Config>(again) &&
             std::get<config::Config>(again) == c);
  FUZZ_CHECK(c.source == kName);
  FUZZ_CHECK(!c.upstream.url.empty() && !c.upstream.host.empty());
  FUZZ_CHECK(c.upstream.base_path.empty() || (c.upstream.base_path.front() == '/' &&
                                              c.upstream.base_path.back() != '/'));
  for (const config::RouteConfig& r : c.routes) {
    FUZZ_CHECK(!r.name.empty() && !r.key.empty());  // no methods: every method that may write
    FUZZ_CHECK(r.path_prefix.empty() != r.path_regex.empty());
  }
  fuzz::Route(c);
  return 0;
}
