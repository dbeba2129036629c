#pragma once
// Server: owns the worker threads (one io_context each), the proxy and admin
// listeners, the key queue and the fence filter, the drain on SIGTERM and
// the reload on SIGHUP or POST /v1/reload. The store is opened by the
// caller and outlives the server.

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "admin/admin_session.h"
#include "app/config_check.h"
#include "config/config.h"
#include "fence/fence_filter.h"
#include "fence/key_queue.h"
#include "metrics/exposition.h"
#include "metrics/route_slots.h"
#include "net/listener.h"
#include "proxy/proxy_context.h"
#include "storage/token_store.h"
#include "tls/tls_context.h"

namespace fencegate::proxy {

class Server {
 public:
  // `set_faults` is empty unless the binary runs with --enable-test-faults.
  // `tls`: the contexts tls::Build made from `config` (listener, upstream).
  Server(std::shared_ptr<const config::Config> config, storage::TokenStore& store,
         std::function<void(const storage::FaultSpec&)> set_faults, tls::Contexts tls = {});
  ~Server();

  // Builds the router and binds every listener. false + *error on failure.
  bool Start(std::string* error);

  // Bound addresses (useful with port 0), valid after Start.
  boost::asio::ip::tcp::endpoint proxy_endpoint() const;
  std::optional<boost::asio::ip::tcp::endpoint> admin_endpoint() const;

  // Runs the worker threads; returns after SIGTERM/SIGINT and the drain.
  void Run();

  // Starts the drain from any thread (what SIGTERM does).
  void Shutdown();

  // Reads the configuration file again for a reload (app::LoadChecked on
  // the --config path). Set before Run; without it SIGHUP is ignored and
  // POST /v1/reload is 404.
  using Loader = std::function<bool(app::CheckedConfig* out, std::string* error)>;
  void SetLoader(Loader loader) { loader_ = std::move(loader); }

  // The reload hook, for a service manager's notify protocol: called on
  // the thread that reloads (the admin thread), with kStarting before the
  // file is read and kDone after the reload was applied or refused
  // (`outcome` says which; nullptr with kStarting). systemd's
  // Type=notify-reload wants RELOADING=1 at the first and READY=1 at the
  // second. Set before Run; it must not block.
  enum class ReloadPhase { kStarting, kDone };
  using ReloadObserver = std::function<void(ReloadPhase phase, const ReloadOutcome* outcome)>;
  void SetReloadObserver(ReloadObserver observer) { reload_observer_ = std::move(observer); }

  // More families for GET /metrics (the lock service's); before Start.
  void AddMetricsSource(metrics::Exposition::Source source) {
    exposition_.Add(std::move(source));
  }

  // Reloads the configuration file now: applied whole, without dropping a
  // connection, or refused whole (an invalid file, a field that changes
  // only with a restart) with the running configuration kept; logged
  // either way. On iocs_[0]'s thread (the admin listener's and the
  // signals').
  ReloadOutcome Reload();

 private:
  void BeginDrain();
  void CheckDrained();
  void StopAll();
  // The metrics endpoint's sources (server_metrics.cc), once the router is built.
  void WireMetrics();
  void WaitForReloadSignal();
  ReloadOutcome ApplyReload();

  // The configuration as started: what is bound at start (threads, the
  // listeners, the store) comes from it. What may change on reload is read
  // from ctx_.live.
  std::shared_ptr<const config::Config> config_;
  tls::Contexts tls_;
  storage::TokenStore& store_;
  KeyQueue queue_;
  FenceFilter fence_;
  ProxyContext ctx_;
  AdminContext admin_ctx_;
  metrics::Exposition exposition_;  // read by the admin listener (GET /metrics)
  metrics::RouteSlots route_slots_;  // route names to request-counter slots, across reloads
  std::vector<std::unique_ptr<boost::asio::io_context>> iocs_;
  std::vector<std::unique_ptr<Worker>> workers_;
  // Keep every io_context running until StopAll; after that each run()
  // returns once its last session, store answer and timer is done.
  std::vector<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> guards_;
  std::shared_ptr<Listener> proxy_listener_;
  std::shared_ptr<Listener> admin_listener_;
  boost::asio::signal_set signals_;
  // SIGHUP, caught from construction on. main holds it before that (from
  // once the configuration has been read), so that one sent while the store
  // opens waits here instead of ending the process.
  boost::asio::signal_set reload_signals_;
  Loader loader_;
  ReloadObserver reload_observer_;
  boost::asio::steady_timer drain_timer_;
  std::chrono::steady_clock::time_point drain_deadline_;
  bool draining_ = false;  // on iocs_[0]'s thread only
  bool stopped_ = false;   // on iocs_[0]'s thread only
};

}  // namespace fencegate::proxy
