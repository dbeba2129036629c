// fencegate: a reverse proxy that refuses writes carrying a stale fencing
// token. This file wires the parts together: config -> store -> server.

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "config/config.h"
#include "locks/lock_server.h"
#include "proxy/router.h"
#include "proxy/server.h"
#include "storage/fault_injecting_store.h"
#include "storage/token_store.h"

namespace {

using namespace fencegate;

constexpr int kExitOk = 0;
constexpr int kExitRuntime = 1;
constexpr int kExitConfig = 2;

void SetUpLogging(const config::LogConfig& log) {
  auto err = spdlog::stderr_logger_mt("fencegate");
  err->set_pattern("%Y-%m-%dT%H:%M:%S.%e%z %^%l%$ %v");
  spdlog::set_default_logger(err);
  spdlog::set_level(spdlog::level::from_str(log.level));
  auto access = spdlog::stderr_logger_mt("access");
  access->set_pattern("%v");
  access->set_level(spdlog::level::info);
}

std::string EndpointString(const boost::asio::ip::tcp::endpoint& e) {
  std::string host = e.address().to_string();
  if (e.address().is_v6()) host = "[" + host + "]";
  return host + ":" + std::to_string(e.port());
}

int Serve(std::shared_ptr<const config::Config> cfg, bool test_faults) {
  storage::StoreOptions options;
  options.engine = cfg->storage.engine;
  options.path = cfg->storage.path;
  options.durability = cfg->storage.durability == config::Durability::kSync
                           ? storage::Durability::kSync
                           : storage::Durability::kAsync;
  storage::Status status;
  std::unique_ptr<storage::TokenStore> store = storage::OpenStore(options, &status);
  if (!store) {
    spdlog::critical("cannot open the token store ({} at {}): {}", options.engine, options.path,
                     status.ToString());
    return kExitRuntime;
  }
  std::function<void(const storage::FaultSpec&)> set_faults;
  if (test_faults) {
    auto wrapper = std::make_unique<storage::FaultInjectingStore>(std::move(store));
    set_faults = [faults = wrapper.get()](const storage::FaultSpec& s) { faults->SetFaults(s); };
    store = std::move(wrapper);
    spdlog::warn("--enable-test-faults: the admin API can make the store fail (tests only)");
  }

  int code = kExitOk;
  {
    proxy::Server server(cfg, *store, set_faults);
    // The lock service (locks.listen, SPEC section 8) runs on its own thread
    // and stops after the server's drain, before the store is closed.
    std::optional<locks::LockServer> lock_server;
    if (cfg->locks.endpoint) lock_server.emplace(cfg, *store);
    std::string error;
    if (!server.Start(&error) || (lock_server && !lock_server->Start(&error))) {
      spdlog::critical("{}", error);
      storage::Status closed = store->Close();
      if (!closed.ok()) spdlog::error("closing the token store: {}", closed.ToString());
      return kExitRuntime;
    }
    nlohmann::json ready = {{"event", "listening"},
                            {"proxy", EndpointString(server.proxy_endpoint())}};
    if (auto admin = server.admin_endpoint()) ready["admin"] = EndpointString(*admin);
    if (lock_server) ready["locks"] = EndpointString(lock_server->endpoint());
    std::cout << ready.dump() << std::endl;  // one line, flushed: tests wait on it
    spdlog::info("fencegate {} proxying {} -> {} (store: {} at {}, durability {})",
                 FENCEGATE_VERSION, EndpointString(server.proxy_endpoint()), cfg->upstream.url,
                 options.engine, options.path,
                 options.durability == storage::Durability::kSync ? "sync" : "async");
    server.Run();
    if (lock_server) lock_server->Stop();
  }
  storage::Status closed = store->Close();
  if (!closed.ok()) {
    spdlog::error("closing the token store: {}", closed.ToString());
    code = kExitRuntime;
  }
  spdlog::info("stopped");
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fencegate: a fencing reverse proxy that refuses writes with stale lock tokens"};
  std::string config_path;
  bool check = false;
  bool version = false;
  bool test_faults = false;
  app.add_option("-c,--config", config_path, "YAML configuration file");
  app.add_flag("--check", check, "validate the configuration and exit (0 valid, 2 invalid)");
  app.add_flag("--version", version, "print the version and exit");
  app.add_flag("--enable-test-faults", test_faults,
               "tests only: let the admin API inject token store faults")
      ->group("");  // hidden
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitConfig;
  }
  if (version) {
    std::cout << "fencegate " << FENCEGATE_VERSION << "\n";
    return kExitOk;
  }
  if (config_path.empty()) {
    std::cerr << "fencegate: --config FILE is required (see --help)\n";
    return kExitConfig;
  }
  config::LoadResult loaded = config::Load(config_path);
  if (auto* error = std::get_if<config::ConfigError>(&loaded)) {
    std::cerr << "fencegate: invalid configuration: " << error->message << "\n";
    return kExitConfig;
  }
  auto cfg = std::make_shared<const config::Config>(std::get<config::Config>(std::move(loaded)));
  // The router compiles what the loader validated (regexes, templates);
  // anything it still refuses is a config error too, caught by --check.
  std::string route_error;
  if (!proxy::Router::Build(cfg->routes, &route_error)) {
    std::cerr << "fencegate: invalid configuration: " << config_path << ": field 'routes': "
              << route_error << "\n";
    return kExitConfig;
  }
  if (check) {
    std::cout << "configuration OK: " << config_path << "\n";
    return kExitOk;
  }
  SetUpLogging(cfg->log);
  return Serve(std::move(cfg), test_faults);
}
