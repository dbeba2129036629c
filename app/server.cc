#include "app/server.h"

#include <algorithm>

#include <spdlog/spdlog.h>

#include <boost/asio/post.hpp>
#include <csignal>
#include <thread>

#include "app/sd_notify.h"
#include "config/restart_fields.h"
#include "proxy/http_session.h"

namespace fencegate::proxy {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

unsigned ThreadCount(unsigned configured) {
  if (configured > 0) return configured;
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : n;
}

// Why `config` cannot run on a store whose idempotency records are
// `records` (nullptr: it keeps none); "" when it can.
std::string IdempotencyProblem(const config::Config& config, storage::IdempotencyStore* records) {
  if (records != nullptr) return "";
  for (const config::RouteConfig& r : config.routes) {
    if (r.idempotency) {
      return config.source + ":" + std::to_string(r.idempotency->line) + ": route " + r.name +
             " has idempotency: on, and the storage engine keeps no idempotency records";
    }
  }
  return "";
}

std::optional<tcp::endpoint> ToTcp(const config::Endpoint& e, std::string* error) {
  boost::system::error_code ec;
  std::string host = e.host == "localhost" ? "127.0.0.1" : e.host;
  auto address = asio::ip::make_address(host, ec);
  if (ec) {
    *error = "bad listen address " + e.ToString() + ": " + ec.message();
    return std::nullopt;
  }
  return tcp::endpoint(address, e.port);
}

}  // namespace

Server::Server(std::shared_ptr<const config::Config> config, storage::TokenStore& store,
               std::function<void(const storage::FaultSpec&)> set_faults, tls::Contexts tls)
    : config_(std::move(config)), tls_(std::move(tls)), store_(store),
      queue_(config_->limits.max_waiting_per_key),
      fence_(store, queue_,
             config_->storage.engine == "etcd" ? config_->storage.etcd.forward_within
                                               : FenceFilter::Clock::duration::zero()),
      iocs_([&] {
        std::vector<std::unique_ptr<asio::io_context>> v;
        for (unsigned i = 0; i < ThreadCount(config_->threads); ++i) {
          v.push_back(std::make_unique<asio::io_context>(1));
        }
        return v;
      }()),
      signals_(*iocs_[0], SIGTERM, SIGINT),
      reload_signals_(*iocs_[0], SIGHUP),
      drain_timer_(*iocs_[0]) {
  ctx_.listener_tls = tls_.listener;
  ctx_.fence = &fence_;
  // Replicas that own keys give up a key once no write of it is left here.
  if (store_.OwnsKeys()) {
    queue_.SetIdleHook([&store = store_](std::string_view key) { store.Disown(key); });
  }
  ctx_.clients = std::make_unique<ClientLimiter>(config_->limits.max_connections_per_client);
  admin_ctx_.config = [this] { return ctx_.live.Get()->config; };
  admin_ctx_.store = &store_;
  admin_ctx_.queue = &queue_;
  admin_ctx_.tree_path_of_key = [this](std::string_view key) {
    return proxy::TreePathOfKey(*ctx_.live.Get()->router, key);
  };
  admin_ctx_.idempotency_counters = &ctx_.idempotency_counters;
  admin_ctx_.set_faults = std::move(set_faults);
  for (auto& ioc : iocs_) {
    workers_.push_back(std::make_unique<Worker>(*ioc, *config_, tls_.upstream.get()));
    ctx_.workers.push_back(workers_.back().get());
  }
}

Server::~Server() = default;

bool Server::Start(std::string* error) {
  auto snapshot = ConfigSnapshot::Make(config_, error, &route_slots_);
  if (!snapshot) return false;
  WireMetrics();
  // Set whether or not a route uses them now: a reload may add one.
  ctx_.idempotency = store_.Idempotency();
  admin_ctx_.idempotency = ctx_.idempotency;
  if (std::string problem = IdempotencyProblem(*config_, ctx_.idempotency); !problem.empty()) {
    *error = problem;
    return false;
  }
  ctx_.live.Set(std::move(snapshot));
  if (loader_) admin_ctx_.reload = [this] { return Reload(); };

  std::vector<asio::io_context*> worker_iocs;
  for (auto& ioc : iocs_) worker_iocs.push_back(ioc.get());
  proxy_listener_ = std::make_shared<Listener>(
      *iocs_[0], worker_iocs, [this](Listener::Socket&& socket, size_t index) {
        if (ctx_.draining.load() ||
            static_cast<uint64_t>(ctx_.active_connections.load()) >=
                ctx_.live.Get()->config->limits.max_connections) {
          boost::system::error_code ignored;
          socket.close(ignored);
          return;
        }
        boost::system::error_code ec;
        tcp::endpoint peer = socket.remote_endpoint(ec);
        std::optional<ClientSlot> slot;
        if (!ec) slot = ctx_.clients->TryAcquire(peer.address());
        if (!slot) {
          // Gone already, or this address holds its share of connections.
          if (!ec) {
            spdlog::debug("connection from {} refused: limits.max_connections_per_client ({})",
                          peer.address().to_string(), config_->limits.max_connections_per_client);
          }
          boost::system::error_code ignored;
          socket.close(ignored);
          return;
        }
        auto session = std::make_shared<HttpSession>(std::move(socket), ctx_, *workers_[index]);
        session->HoldClientSlot(std::move(*slot));
        session->Run();
      });
  auto endpoint = ToTcp(config_->endpoint, error);
  if (!endpoint || !proxy_listener_->Open(*endpoint, error)) return false;

  if (config_->admin.endpoint) {
    admin_listener_ = std::make_shared<Listener>(
        *iocs_[0], std::vector<asio::io_context*>{iocs_[0].get()},
        [this](Listener::Socket&& socket, size_t) {
          std::make_shared<AdminSession>(tcp::socket(std::move(socket)), admin_ctx_)->Run();
        });
    auto admin = ToTcp(*config_->admin.endpoint, error);
    if (!admin || !admin_listener_->Open(*admin, error)) return false;
  }
  return true;
}

tcp::endpoint Server::proxy_endpoint() const { return proxy_listener_->local_endpoint(); }

std::optional<tcp::endpoint> Server::admin_endpoint() const {
  if (!admin_listener_) return std::nullopt;
  return admin_listener_->local_endpoint();
}

void Server::Run() {
  proxy_listener_->Run();
  if (admin_listener_) admin_listener_->Run();
  signals_.async_wait([this](boost::system::error_code ec, int signo) {
    if (ec) return;
    reload_signals_.cancel();
    spdlog::info("signal {}: draining (deadline {} ms; send it again to stop at once)", signo,
                 ctx_.live.Get()->config->limits.drain_timeout.count());
    // Wait for a second signal first: the drain may finish (and cancel
    // this wait) before BeginDrain returns.
    signals_.async_wait([this](boost::system::error_code ec, int) {
      if (ec) return;
      spdlog::warn("second signal: closing the remaining connections");
      StopAll();
    });
    BeginDrain();
  });
  WaitForReloadSignal();
  for (auto& ioc : iocs_) guards_.push_back(asio::make_work_guard(*ioc));
  std::vector<std::thread> threads;
  for (size_t i = 1; i < iocs_.size(); ++i) {
    threads.emplace_back([this, i] { iocs_[i]->run(); });
  }
  iocs_[0]->run();
  for (auto& t : threads) t.join();
}

void Server::Shutdown() {
  asio::post(*iocs_[0], [this] { BeginDrain(); });
}

void Server::BeginDrain() {
  if (draining_) return;
  draining_ = true;
  ctx_.draining.store(true);
  app::NotifyStopping();
  proxy_listener_->Stop();
  if (admin_listener_) admin_listener_->Stop();
  // Close the idle keep-alive connections on every worker.
  for (auto& w : workers_) {
    asio::post(w->ioc, [worker = w.get()] {
      std::vector<HttpSession*> sessions(worker->sessions.begin(), worker->sessions.end());
      for (HttpSession* s : sessions) s->Drain();
    });
  }
  drain_deadline_ =
      std::chrono::steady_clock::now() + ctx_.live.Get()->config->limits.drain_timeout;
  CheckDrained();
}

void Server::CheckDrained() {
  if (ctx_.requests_in_flight.load() == 0 && ctx_.active_connections.load() == 0) {
    spdlog::info("drained: no request in flight");
    return StopAll();
  }
  if (std::chrono::steady_clock::now() >= drain_deadline_) {
    spdlog::warn("drain deadline reached with {} request(s) in flight; closing",
                 ctx_.requests_in_flight.load());
    return StopAll();
  }
  drain_timer_.expires_after(std::chrono::milliseconds(20));
  drain_timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec) CheckDrained();
  });
}

void Server::StopAll() {
  if (stopped_) return;
  stopped_ = true;
  signals_.cancel();
  reload_signals_.cancel();
  drain_timer_.cancel();
  proxy_listener_->Stop();
  if (admin_listener_) admin_listener_->Stop();
  for (auto& w : workers_) {
    asio::post(w->ioc, [worker = w.get()] {
      std::vector<HttpSession*> sessions(worker->sessions.begin(), worker->sessions.end());
      for (HttpSession* s : sessions) s->ForceClose();
      worker->pool.Clear();
      worker->sweep.Stop();
    });
  }
  std::vector<AdminSession*> admins(admin_ctx_.sessions.begin(), admin_ctx_.sessions.end());
  for (AdminSession* a : admins) a->Close();
  // Each run() now returns once the work still under way has finished.
  guards_.clear();
}

// ---------------------------------------------------------------------------
// Reload.

void Server::WaitForReloadSignal() {
  reload_signals_.async_wait([this](boost::system::error_code ec, int) {
    if (ec) return;
    if (loader_) {
      spdlog::info("SIGHUP: reloading the configuration from {}", config_->source);
      Reload();
    } else {
      spdlog::warn("SIGHUP: this process cannot reload its configuration; ignored");
    }
    if (!draining_) WaitForReloadSignal();
  });
}

ReloadOutcome Server::Reload() {
  if (reload_observer_) reload_observer_(ReloadPhase::kStarting, nullptr);
  ReloadOutcome outcome = ApplyReload();
  if (outcome.applied) {
    spdlog::info("configuration reloaded from {}: {} routes", outcome.source, outcome.routes);
  } else {
    spdlog::error("configuration reload from {} refused, the running configuration stays: {}",
                  outcome.source, outcome.message);
  }
  if (reload_observer_) reload_observer_(ReloadPhase::kDone, &outcome);
  return outcome;
}

ReloadOutcome Server::ApplyReload() {
  ReloadOutcome out;
  out.source = config_->source;
  if (draining_) {
    out.error = "draining";
    out.message = "fencegate is stopping; nothing to reload";
    return out;
  }
  app::CheckedConfig next;
  std::string error;
  if (!loader_(&next, &error)) {
    out.error = "invalid_config";
    out.message = error;
    return out;
  }
  // The TLS contexts just built were only the check: what uses TLS is
  // bound at start (RestartOnlyChanges).
  std::shared_ptr<const ConfigSnapshot> running = ctx_.live.Get();
  out.fields = config::RestartOnlyChanges(*running->config, *next.config);
  if (!out.fields.empty()) {
    out.error = "restart_required";
    for (const std::string& f : out.fields) out.message += (out.message.empty() ? "" : "; ") + f;
    return out;
  }
  if (std::string problem = IdempotencyProblem(*next.config, ctx_.idempotency);
      !problem.empty()) {
    out.error = "invalid_config";
    out.message = problem;
    return out;
  }
  std::shared_ptr<const ConfigSnapshot> snapshot =
      ConfigSnapshot::Make(next.config, &error, &route_slots_);
  if (!snapshot) {
    out.error = "invalid_config";
    out.message = out.source + ": field 'routes': " + error;
    return out;
  }
  const config::Config& cfg = *next.config;
  // From here on every new request, and the next one on each kept-alive
  // connection, runs under `snapshot`; requests under way keep theirs.
  ctx_.live.Set(snapshot);
  // The application's logger only: the access log keeps its own level.
  spdlog::default_logger()->set_level(spdlog::level::from_str(cfg.log.level));
  // What each worker sized from the configuration, on its own thread.
  const std::chrono::milliseconds sweep = SessionSweepInterval(cfg);
  for (auto& w : workers_) {
    asio::post(w->ioc, [worker = w.get(), snapshot, sweep] {
      worker->pool.Retune(snapshot->config->upstream);
      worker->sweep.SetInterval(sweep);
    });
  }
  out.applied = true;
  out.routes = cfg.routes.size();
  return out;
}

}  // namespace fencegate::proxy
