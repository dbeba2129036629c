#include "app/server.h"

#include <algorithm>

#include <spdlog/spdlog.h>

#include <boost/asio/post.hpp>
#include <csignal>
#include <thread>

#include "app/sd_notify.h"
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
      drain_timer_(*iocs_[0]) {
  ctx_.config = config_;
  ctx_.listener_tls = tls_.listener;
  ctx_.fence_settings.token_header = config_->fencing.token_header;
  ctx_.fence = &fence_;
  ctx_.clients = std::make_unique<ClientLimiter>(config_->limits.max_connections_per_client);
  admin_ctx_.config = config_;
  admin_ctx_.store = &store_;
  admin_ctx_.queue = &queue_;
  admin_ctx_.idempotency_counters = &ctx_.idempotency_counters;
  admin_ctx_.set_faults = std::move(set_faults);
  for (auto& ioc : iocs_) {
    workers_.push_back(std::make_unique<Worker>(*ioc, *config_, tls_.upstream.get()));
    ctx_.workers.push_back(workers_.back().get());
  }
}

Server::~Server() = default;

bool Server::Start(std::string* error) {
  auto router = Router::Build(config_->routes, error);
  if (!router) return false;
  ctx_.router = std::move(router);
  WireMetrics();
  if (std::any_of(config_->routes.begin(), config_->routes.end(),
                  [](const config::RouteConfig& r) { return r.idempotency.has_value(); })) {
    ctx_.idempotency = store_.Idempotency();
    if (ctx_.idempotency == nullptr) {
      *error = "a route has idempotency: on, and the storage engine keeps no idempotency records";
      return false;
    }
    admin_ctx_.idempotency = ctx_.idempotency;
  }

  std::vector<asio::io_context*> worker_iocs;
  for (auto& ioc : iocs_) worker_iocs.push_back(ioc.get());
  proxy_listener_ = std::make_shared<Listener>(
      *iocs_[0], worker_iocs, [this](Listener::Socket&& socket, size_t index) {
        if (ctx_.draining.load() ||
            static_cast<uint64_t>(ctx_.active_connections.load()) >=
                config_->limits.max_connections) {
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
    spdlog::info("signal {}: draining (deadline {} ms; send it again to stop at once)", signo,
                 config_->limits.drain_timeout.count());
    // Wait for a second signal first: the drain may finish (and cancel
    // this wait) before BeginDrain returns.
    signals_.async_wait([this](boost::system::error_code ec, int) {
      if (ec) return;
      spdlog::warn("second signal: closing the remaining connections");
      StopAll();
    });
    BeginDrain();
  });
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
  drain_deadline_ = std::chrono::steady_clock::now() + config_->limits.drain_timeout;
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

}  // namespace fencegate::proxy
