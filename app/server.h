#pragma once
// Server: owns the worker threads (one io_context each), the proxy and admin
// listeners, the key queue and the fence filter, and the drain on SIGTERM.
// The store is opened by the caller and outlives the server.

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
#include "config/config.h"
#include "fence/fence_filter.h"
#include "fence/key_queue.h"
#include "metrics/exposition.h"
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

 private:
  void BeginDrain();
  void CheckDrained();
  void StopAll();
  // The metrics endpoint's sources (server_metrics.cc), once the router is built.
  void WireMetrics();

  std::shared_ptr<const config::Config> config_;
  tls::Contexts tls_;
  storage::TokenStore& store_;
  KeyQueue queue_;
  FenceFilter fence_;
  ProxyContext ctx_;
  AdminContext admin_ctx_;
  metrics::Exposition exposition_;  // read by the admin listener (GET /metrics)
  std::vector<std::unique_ptr<boost::asio::io_context>> iocs_;
  std::vector<std::unique_ptr<Worker>> workers_;
  // Keep every io_context running until StopAll; after that each run()
  // returns once its last session, store answer and timer is done.
  std::vector<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> guards_;
  std::shared_ptr<Listener> proxy_listener_;
  std::shared_ptr<Listener> admin_listener_;
  boost::asio::signal_set signals_;
  boost::asio::steady_timer drain_timer_;
  std::chrono::steady_clock::time_point drain_deadline_;
  bool draining_ = false;  // on iocs_[0]'s thread only
  bool stopped_ = false;   // on iocs_[0]'s thread only
};

}  // namespace fencegate::proxy
