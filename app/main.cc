// fencegate: a reverse proxy that refuses writes carrying a stale fencing
// token. This file wires the parts together: config -> store -> server.

#include <pthread.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>

#include "app/config_check.h"
#include "app/log_files.h"
#include "app/route_explain.h"
#include "app/sd_notify.h"
#include "app/store_tools.h"
#include "app/tree_entry.h"
#include "app/server.h"
#include "config/config.h"
#include "config/log_paths.h"
#include "config/secrets.h"
#include "fence/router.h"
#include "locks/lock_server.h"
#include "net/heap_policy.h"
#include "storage/export_import.h"
#include "storage/fault_injecting_store.h"
#include "storage/token_store.h"
#include "tls/tls_context.h"

namespace {

using namespace fencegate;

constexpr int kExitOk = 0;
constexpr int kExitRuntime = 1;
constexpr int kExitConfig = 2;

// Holds `sig` (blocks it) in the calling thread and in every thread it
// starts from now on, or lets it through the calling thread again.
void HoldSignal(int sig, bool hold) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, sig);
  pthread_sigmask(hold ? SIG_BLOCK : SIG_UNBLOCK, &set, nullptr);
}

std::string EndpointString(const boost::asio::ip::tcp::endpoint& e) {
  std::string host = e.address().to_string();
  if (e.address().is_v6()) host = "[" + host + "]";
  return host + ":" + std::to_string(e.port());
}

// The process's environment, read at start and on reload (admin.token_env).
// Nothing in fencegate sets a variable, so reading it from the reloading
// thread races with no writer.
std::optional<std::string> ProcessEnvironment(const std::string& name) {
  const char* value = std::getenv(name.c_str());  // NOLINT(concurrency-mt-unsafe): no writer
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

int Serve(const std::shared_ptr<const config::Config>& cfg, bool test_faults,
          tls::Contexts tls) {
  for (const std::string& warning : tls.warnings) spdlog::warn("{}", warning);
  if (cfg->storage.etcd.https && cfg->storage.engine != "etcd") {
    spdlog::debug("storage.etcd.tls was checked; it is used only with storage.engine: etcd");
  }
  storage::StoreOptions options;
  std::string options_error;
  // tls.etcd outlives the store: this function holds it to the end.
  const std::shared_ptr<boost::asio::ssl::context> etcd_tls = tls.etcd;
  if (!app::StoreOptionsOf(*cfg, etcd_tls.get(), &options, &options_error)) {
    spdlog::critical("{}", options_error);
    return kExitRuntime;
  }
  // A store from before the tree of paths enters it, once (app/tree_entry.h):
  // the embedded store before it opens; etcd beside the serving replica,
  // which must start while etcd is down.
  std::optional<app::TreeEntryBeside> entry_beside;
  if (options.engine == "etcd") {
    entry_beside.emplace(cfg->routes, options);
  } else if (std::string error; !app::EnterTreeAtStart(cfg->routes, options, &error)) {
    spdlog::critical("{}", error);
    return kExitRuntime;
  }
  storage::Status status;
  std::unique_ptr<storage::TokenStore> store = storage::OpenStore(options, &status);
  if (!store) {
    spdlog::critical("cannot open the token store ({} at {}): {}", options.engine,
                     app::StoreWhere(options), status.ToString());
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
    proxy::Server server(cfg, *store, set_faults, std::move(tls));
    HoldSignal(SIGHUP, false);  // the server catches it from its construction on
    // SIGHUP and POST /v1/reload read the --config file again, as --check does.
    server.SetLoader([path = cfg->source](app::CheckedConfig* out, std::string* error) {
      return app::LoadChecked(path, /*read_files=*/true, ProcessEnvironment, out, error);
    });
    // systemd's Type=notify: RELOADING=1 while a reload runs, READY=1 after.
    server.SetReloadObserver([](proxy::Server::ReloadPhase phase, const proxy::ReloadOutcome*) {
      if (phase == proxy::Server::ReloadPhase::kStarting) {
        app::NotifyReloading();
      } else {
        app::NotifyReady();
      }
    });
    // The lock service (locks.listen, docs/contract.md, "Lock service") runs
    // on its own thread and stops after the server's drain, before the store
    // is closed.
    std::optional<locks::LockServer> lock_server;
    if (cfg->locks.endpoint) {
      lock_server.emplace(cfg, *store);
      // Read at scrape time; the admin listener stops before lock_server goes.
      server.AddMetricsSource(
          [&locks = *lock_server](metrics::Families* out) { locks.AddMetrics(out); });
    }
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
    app::NotifyReady();  // systemd's Type=notify: the same moment
    if (options.engine == "etcd") {
      spdlog::info("fencegate {} proxying {} -> {} (store: etcd at {}, prefix {})",
                   FENCEGATE_VERSION, EndpointString(server.proxy_endpoint()), cfg->upstream.url,
                   app::StoreWhere(options), options.etcd.prefix);
    } else {
      spdlog::info("fencegate {} proxying {} -> {} (store: {} at {}, durability {})",
                   FENCEGATE_VERSION, EndpointString(server.proxy_endpoint()),
                   cfg->upstream.url, options.engine, options.path,
                   options.durability == storage::Durability::kSync ? "sync" : "async");
    }
    server.Run();
    if (lock_server) lock_server->Stop();
  }
  entry_beside.reset();
  storage::Status closed = store->Close();
  if (!closed.ok()) {
    spdlog::error("closing the token store: {}", closed.ToString());
    code = kExitRuntime;
  }
  spdlog::info("stopped");
  return code;
}

int Main(int argc, char** argv) {
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
  // Subcommands; plain `fencegate --config FILE` still runs the proxy.
  std::string sub_config;
  std::string export_output = "-";
  std::string import_input = "-";
  CLI::App* export_cmd = app.add_subcommand(
      "export", "write every key and its token as JSON lines (run while fencegate is stopped)");
  export_cmd->add_option("-c,--config", sub_config, "YAML configuration file (storage section)");
  export_cmd->add_option("-o,--output", export_output, "file to write, - for stdout (default)");
  CLI::App* import_cmd = app.add_subcommand(
      "import", "raise tokens from JSON lines (never lowers; run while fencegate is stopped)");
  import_cmd->add_option("-c,--config", sub_config, "YAML configuration file (storage section)");
  import_cmd->add_option("-i,--input", import_input, "file to read, - for stdin (default)");
  bool skip_unmapped = false;
  CLI::App* enter_cmd = app.add_subcommand(
      "enter-tree",
      "enter the store's keys into the tree of paths, as the first start after an upgrade does "
      "(run while fencegate is stopped)");
  enter_cmd->add_option("-c,--config", sub_config, "YAML configuration file (storage, routes)");
  enter_cmd->add_flag("--skip-unmapped", skip_unmapped,
                      "enter the keys that map back to paths even though others may be the keys "
                      "of routes that fence under other keys; leave those outside the tree");
  proxy::ExplainRequest explain;
  std::vector<std::string> explain_headers;
  bool explain_json = false;
  CLI::App* route_cmd = app.add_subcommand(
      "route",
      "print the route, canonical path and keys a request would be fenced under (or why it "
      "would be refused), without starting anything");
  route_cmd->add_option("-c,--config", sub_config, "YAML configuration file (routes)");
  route_cmd->add_option("method", explain.method, "the request's method, e.g. PUT")->required();
  route_cmd->add_option("target", explain.target, "the request target, e.g. /objects/a%3A1")
      ->required();
  route_cmd->add_option("-H,--header", explain_headers, "a request header, 'Name: value'");
  route_cmd->add_flag("--json", explain_json, "print one JSON object");
  app.require_subcommand(0, 1);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitConfig;
  }
  if (version) {
    std::cout << "fencegate " << FENCEGATE_VERSION << "\n";
    return kExitOk;
  }
  const bool tool = export_cmd->parsed() || import_cmd->parsed() || route_cmd->parsed() ||
                    enter_cmd->parsed();
  if (tool && !sub_config.empty()) config_path = sub_config;
  if (tool && check) {
    std::cerr << "fencegate: --check cannot be combined with export, import, route or "
                 "enter-tree\n";
    return kExitConfig;
  }
  if (config_path.empty()) {
    std::cerr << "fencegate: --config FILE is required (see --help)\n";
    return kExitConfig;
  }
  app::CheckedConfig checked;
  std::string config_error;
  if (!app::LoadChecked(config_path, !tool, ProcessEnvironment, &checked, &config_error)) {
    std::cerr << "fencegate: invalid configuration: " << config_error << "\n";
    return kExitConfig;
  }
  std::shared_ptr<const config::Config> cfg = checked.config;
  tls::Contexts tls_contexts = std::move(checked.tls);
  std::string route_error;
  if (check) {
    auto listener = [](const std::optional<config::Endpoint>& e) {
      return e ? e->ToString() : std::string("off");
    };
    for (const std::string& warning : tls_contexts.warnings) {
      std::cerr << "fencegate: warning: " << warning << "\n";
    }
    for (const std::string& warning : checked.warnings) {
      std::cerr << "fencegate: warning: " << warning << "\n";
    }
    std::cout << "configuration OK: " << config_path << " (proxy " << cfg->endpoint.ToString()
              << (cfg->tls.enabled ? " with TLS" : "") << ", admin " << listener(cfg->admin.endpoint) << ", locks "
              << listener(cfg->locks.endpoint) << ", upstream " << cfg->upstream.url << ")\n";
    return kExitOk;
  }
  if (route_cmd->parsed()) {
    std::unique_ptr<proxy::Router> router = proxy::Router::Build(cfg->routes, &route_error);
    for (const std::string& h : explain_headers) {
      std::pair<std::string, std::string> field;
      if (!proxy::ParseHeaderArgument(h, &field)) {
        std::cerr << "fencegate route: -H '" << h << "' is not 'Name: value'\n";
        return kExitConfig;
      }
      explain.headers.push_back(std::move(field));
    }
    nlohmann::json e = proxy::ExplainRoute(*cfg, *router, explain);
    std::cout << (explain_json ? e.dump() + "\n" : proxy::FormatExplanation(e));
    return kExitOk;
  }
  if (export_cmd->parsed()) return app::RunExport(*cfg, export_output);
  if (import_cmd->parsed()) return app::RunImport(*cfg, import_input);
  if (enter_cmd->parsed()) return app::RunEnterTree(*cfg, skip_unmapped);
  // SIGUSR1 (reopen the log files) and SIGHUP (reload) are held from here,
  // once the configuration has been read, until what acts on them exists:
  // one sent while a log file or the store opens (replaying a long WAL
  // takes seconds) is acted on then, instead of ending the process by the
  // default action. Threads started meanwhile (RocksDB's, the I/O threads)
  // keep them held; the main thread, which lives as long as the process,
  // takes them.
  HoldSignal(SIGUSR1, true);
  HoldSignal(SIGHUP, true);
  LogFiles logs;
  if (std::string log_error; !logs.Open(cfg->log, &log_error)) {
    std::cerr << "fencegate: cannot open a log file: " << log_error << "\n";
    return kExitRuntime;
  }
  logs.WatchReopenSignal();
  HoldSignal(SIGUSR1, false);
  for (const std::string& warning : checked.warnings) spdlog::warn("{}", warning);
  return Serve(cfg, test_faults, std::move(tls_contexts));
}

}  // namespace

// An exception that reaches here is a bug (errors the network, the disk or
// the operator cause are handled where they happen): say so on stderr and
// exit 1, after the destructors on the way have closed the store, instead of
// std::terminate's abort.
int main(int argc, char** argv) {
  fencegate::proxy::KeepFreedHeapMemory();  // before any thread or large buffer
  try {
    return Main(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "fencegate: internal error: " << e.what() << "\n";
  } catch (...) {
    std::cerr << "fencegate: internal error: an unknown exception\n";
  }
  return kExitRuntime;
}
