#include "app/config_check.h"

#include <utility>
#include <variant>

#include "config/log_paths.h"
#include "fence/router.h"

namespace fencegate::app {

bool LoadChecked(const std::string& path, bool read_files, const config::Environment& environment,
                 CheckedConfig* out, std::string* error) {
  config::LoadResult loaded = config::Load(path);
  if (auto* failed = std::get_if<config::ConfigError>(&loaded)) {
    *error = failed->message;
    return false;
  }
  // The admin token's file or variable is read now, so --check finds a
  // missing file or an unset variable (not by the tools, which need no
  // admin token).
  if (read_files &&
      !config::ResolveSecrets(&std::get<config::Config>(loaded), environment, error)) {
    return false;
  }
  // A log file fencegate could not create or append to stops it here, and
  // --check finds it.
  if (read_files && !config::CheckLogFiles(std::get<config::Config>(loaded), error)) return false;
  auto cfg = std::make_shared<const config::Config>(std::get<config::Config>(std::move(loaded)));
  // The router compiles what the loader validated (regexes, templates);
  // anything it still refuses is a config error too, caught by --check.
  std::string route_error;
  if (!proxy::Router::Build(cfg->routes, &route_error)) {
    *error = path + ": field 'routes': " + route_error;
    return false;
  }
  // Every certificate, key and CA file is read now, so --check finds a
  // missing file or a key that does not belong to its certificate.
  tls::Contexts contexts;
  if (read_files && !tls::Build(*cfg, &contexts, error)) return false;
  // in_flight_timeout is how long a key stays reserved after fencegate gave
  // up on a request (upstream.timeout without a byte): shorter, and a
  // repeat may run while the backend still works on the first.
  for (size_t i = 0; i < cfg->routes.size(); ++i) {
    const auto& idem = cfg->routes[i].idempotency;
    if (idem && idem->in_flight_timeout < cfg->upstream.timeout) {
      out->warnings.push_back(
          "routes[" + std::to_string(i) + "] (" + cfg->routes[i].name +
          "): idempotency.in_flight_timeout (" + std::to_string(idem->in_flight_timeout.count()) +
          " ms) is shorter than upstream.timeout (" + std::to_string(cfg->upstream.timeout.count()) +
          " ms): after a request times out, a repeat may run while the backend still works on "
          "it; make in_flight_timeout at least upstream.timeout");
    }
  }
  out->config = std::move(cfg);
  out->tls = std::move(contexts);
  return true;
}

}  // namespace fencegate::app
