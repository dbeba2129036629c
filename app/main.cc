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

// The store's options from the configuration: the etcd engine's password is
// read from its file here, and `etcd_tls` (https endpoints) is not owned.
// false + *error when the password cannot be read.
bool StoreOptionsOf(const config::Config& cfg, boost::asio::ssl::context* etcd_tls,
                    storage::StoreOptions* options, std::string* error) {
  options->engine = cfg.storage.engine;
  options->path = cfg.storage.path;
  options->durability = cfg.storage.durability == config::Durability::kSync
                            ? storage::Durability::kSync
                            : storage::Durability::kAsync;
  const config::EtcdConfig& etcd = cfg.storage.etcd;
  options->etcd.endpoints = etcd.endpoints;
  options->etcd.prefix = etcd.prefix;
  options->etcd.timeout = etcd.timeout;
  options->etcd.tls = etcd_tls;
  options->etcd.tls_server_name = etcd.tls.server_name;
  options->etcd.username = etcd.username;
  options->etcd.max_batch = etcd.max_batch;
  if (cfg.storage.engine == "etcd" && !etcd.password_file.empty()) {
    std::optional<std::string> password =
        config::ReadSecretFile(cfg.source, etcd.password_file, "storage.etcd.password_file", error);
    if (!password) return false;
    options->etcd.password = std::move(*password);
  }
  return true;
}

// The process's environment, read at start and on reload (admin.token_env).
// Nothing in fencegate sets a variable, so reading it from the reloading
// thread races with no writer.
std::optional<std::string> ProcessEnvironment(const std::string& name) {
  const char* value = std::getenv(name.c_str());  // NOLINT(concurrency-mt-unsafe): no writer
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

// Where the store is, for messages: its directory, or etcd's endpoints.
std::string StoreWhere(const storage::StoreOptions& options) {
  if (options.engine != "etcd") return options.path;
  std::string out;
  for (const std::string& e : options.etcd.endpoints) out += (out.empty() ? "" : ",") + e;
  return out;
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
  if (!StoreOptionsOf(*cfg, etcd_tls.get(), &options, &options_error)) {
    spdlog::critical("{}", options_error);
    return kExitRuntime;
  }
  storage::Status status;
  std::unique_ptr<storage::TokenStore> store = storage::OpenStore(options, &status);
  if (!store) {
    spdlog::critical("cannot open the token store ({} at {}): {}", options.engine,
                     StoreWhere(options), status.ToString());
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
                   StoreWhere(options), options.etcd.prefix);
    } else {
      spdlog::info("fencegate {} proxying {} -> {} (store: {} at {}, durability {})",
                   FENCEGATE_VERSION, EndpointString(server.proxy_endpoint()),
                   cfg->upstream.url, options.engine, options.path,
                   options.durability == storage::Durability::kSync ? "sync" : "async");
    }
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


// `fencegate export` / `fencegate import`: back up or move fences
// (storage/export_import.h). With rocksdb both open the data dir directly,
// so they run while fencegate is stopped; with etcd they run beside the
// replicas.
void PrintStoreError(const char* what, const storage::StoreOptions& options,
                     const storage::Status& status) {
  std::cerr << "fencegate " << what << ": " << StoreWhere(options) << ": " << status.ToString()
            << "\n";
  if (status.code() == storage::Status::Code::kBusy && options.engine == "rocksdb") {
    std::cerr << "fencegate " << what
              << ": export and import open the token store directly; stop the fencegate that "
                 "uses it first\n";
  }
}

// The store's options for export and import, with the TLS context of https
// etcd endpoints in *etcd_tls. false + *error when either cannot be made.
bool ToolStoreOptions(const config::Config& cfg,
                      std::shared_ptr<boost::asio::ssl::context>* etcd_tls,
                      storage::StoreOptions* options, std::string* error) {
  if (cfg.storage.engine == "etcd" && cfg.storage.etcd.https) {
    *etcd_tls = tls::ClientContext(cfg.storage.etcd.tls, "storage.etcd.tls", cfg.source, error);
    if (!*etcd_tls) return false;
  }
  return StoreOptionsOf(cfg, etcd_tls->get(), options, error);
}

int RunExport(const config::Config& cfg, const std::string& output) {
  storage::StoreOptions options;
  std::string options_error;
  std::shared_ptr<boost::asio::ssl::context> etcd_tls;
  if (!ToolStoreOptions(cfg, &etcd_tls, &options, &options_error)) {
    std::cerr << "fencegate export: " << options_error << "\n";
    return kExitRuntime;
  }
  std::ofstream file;
  if (output != "-") {
    file.open(output, std::ios::out | std::ios::trunc);
    if (!file) {
      std::cerr << "fencegate export: cannot write " << output << "\n";
      return kExitRuntime;
    }
  }
  std::ostream& out = output == "-" ? std::cout : file;
  uint64_t count = 0;
  storage::Status s = storage::ExportStore(options, out, &count);
  if (!s.ok()) {
    PrintStoreError("export", options, s);
    return kExitRuntime;
  }
  std::cerr << "fencegate export: " << count << " keys from " << StoreWhere(options) << "\n";
  return kExitOk;
}

int RunImport(const config::Config& cfg, const std::string& input) {
  std::ifstream file;
  if (input != "-") {
    file.open(input);
    if (!file) {
      std::cerr << "fencegate import: cannot read " << input << "\n";
      return kExitConfig;
    }
  }
  std::istream& in = input == "-" ? std::cin : file;
  std::vector<storage::TokenRecord> records;
  // Everything is parsed before anything is applied: a bad line changes nothing.
  if (storage::Status s = storage::ReadRecords(in, &records); !s.ok()) {
    std::cerr << "fencegate import: " << (input == "-" ? "<stdin>" : input) << ": "
              << s.message() << "; nothing was imported\n";
    return kExitConfig;
  }
  storage::StoreOptions options;
  std::string options_error;
  std::shared_ptr<boost::asio::ssl::context> etcd_tls;
  if (!ToolStoreOptions(cfg, &etcd_tls, &options, &options_error)) {
    std::cerr << "fencegate import: " << options_error << "\n";
    return kExitRuntime;
  }
  storage::Status status;
  std::unique_ptr<storage::TokenStore> store = storage::OpenStore(options, &status);
  if (!store) {
    PrintStoreError("import", options, status);
    return kExitRuntime;
  }
  storage::ImportSummary summary;
  storage::Status imported = storage::ImportTokens(*store, records, &summary);
  storage::Status closed = store->Close();
  if (!imported.ok() || !closed.ok()) {
    PrintStoreError("import", options, imported.ok() ? closed : imported);
    std::cerr << "fencegate import: " << summary.records << " of " << records.size()
              << " records were applied before the error (tokens only go up; run the import "
                 "again)\n";
    return kExitRuntime;
  }
  std::cerr << "fencegate import: " << summary.records << " records into " << StoreWhere(options)
            << ": " << summary.at_imported << " now at the imported token, "
            << summary.already_higher << " already higher (kept)\n";
  return kExitOk;
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
  const bool tool = export_cmd->parsed() || import_cmd->parsed() || route_cmd->parsed();
  if (tool && !sub_config.empty()) config_path = sub_config;
  if (tool && check) {
    std::cerr << "fencegate: --check cannot be combined with export, import or route\n";
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
  if (export_cmd->parsed()) return RunExport(*cfg, export_output);
  if (import_cmd->parsed()) return RunImport(*cfg, import_input);
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
