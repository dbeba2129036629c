#include "locks/lock_server.h"

#include <spdlog/spdlog.h>

#include <boost/asio/post.hpp>
#include <vector>

namespace fencegate::locks {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

LockServer::LockServer(std::shared_ptr<const config::Config> config, storage::TokenStore& store)
    : config_(std::move(config)), service_(ioc_.get_executor(), store, clock_) {
  ctx_.service = &service_;
  ctx_.max_ttl = config_->locks.max_ttl;
  ctx_.max_header_bytes = config_->limits.max_header_bytes;
  ctx_.header_timeout = config_->limits.header_timeout;
}

LockServer::~LockServer() { Stop(); }  // NOLINT(bugprone-exception-escape): see lock_server.h

bool LockServer::Start(std::string* error) {
  const config::Endpoint& e = *config_->locks.endpoint;
  boost::system::error_code ec;
  auto address = asio::ip::make_address(e.host == "localhost" ? "127.0.0.1" : e.host, ec);
  if (ec) {
    *error = "bad locks.listen address " + e.ToString() + ": " + ec.message();
    return false;
  }
  listener_ = std::make_shared<proxy::Listener>(
      ioc_, std::vector<asio::io_context*>{&ioc_}, [this](proxy::Listener::Socket&& socket, size_t) {
        std::make_shared<LockSession>(tcp::socket(std::move(socket)), ctx_)->Run();
      });
  if (!listener_->Open(tcp::endpoint(address, e.port), error)) {
    *error = "lock service: " + *error;
    return false;
  }
  listener_->Run();
  guard_.emplace(asio::make_work_guard(ioc_));
  thread_ = std::thread([this] { ioc_.run(); });
  return true;
}

tcp::endpoint LockServer::endpoint() const { return listener_->local_endpoint(); }

void LockServer::Stop() {
  if (!thread_.joinable()) return;
  asio::post(ioc_, [this] {
    listener_->Stop();
    service_.Shutdown();
    std::vector<LockSession*> sessions(ctx_.sessions.begin(), ctx_.sessions.end());
    for (LockSession* s : sessions) s->Close();
  });
  // run() returns once the sessions are gone and no store answer is pending.
  guard_.reset();
  thread_.join();
  spdlog::info("lock service stopped");
}

void LockServer::AddMetrics(metrics::Families* out) const {
  const LockCounters& c = service_.counters();
  struct Row {
    const char* name;
    const char* help;
    const std::atomic<uint64_t>& value;
  };
  const Row rows[] = {
      {"fencegate_locks_grants_total", "Leases the lock service granted.", c.grants},
      {"fencegate_locks_renewals_total", "Leases renewed.", c.renewals},
      {"fencegate_locks_releases_total", "Leases released by their holder.", c.releases},
      {"fencegate_locks_expirations_total", "Leases whose TTL ran out.", c.expirations},
      {"fencegate_locks_refused_held_total",
       "Acquires answered 409: the lock was held, after any wait.", c.refused_held},
      {"fencegate_locks_store_errors_total",
       "Grants refused because their token could not be made durable.", c.store_errors},
  };
  for (const Row& r : rows) {
    metrics::AddCounter(out, r.name, r.help,
                        static_cast<double>(r.value.load(std::memory_order_relaxed)));
  }
}

}  // namespace fencegate::locks
