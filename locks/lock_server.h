#pragma once
// LockServer: the lock service's listener (locks.listen) on an io_context
// and thread of its own, next to the proxy's Server. It shares only the
// token store with the proxy. Start() binds; Stop() (or the destructor)
// closes the listener and every connection, answers waiting acquires 503,
// lets grants whose store write is in flight finish, and joins the thread.
// Call Stop() before the store is closed.

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "config/config.h"
#include "locks/lock_service.h"
#include "locks/lock_session.h"
#include "metrics/exposition.h"
#include "net/listener.h"
#include "storage/token_store.h"

namespace fencegate::locks {

class LockServer {
 public:
  LockServer(std::shared_ptr<const config::Config> config, storage::TokenStore& store);
  // Stops (see Stop()). Only an allocation or a failed thread join can
  // throw there, and std::terminate is then the right end: the service
  // thread would outlive the object it runs on.
  ~LockServer();  // NOLINT(bugprone-exception-escape)

  // Binds config.locks.endpoint (which must be set) and starts the thread.
  bool Start(std::string* error);
  boost::asio::ip::tcp::endpoint endpoint() const;  // bound address, after Start
  void Stop();

  // The lock service's counters as Prometheus families
  // (fencegate_locks_*_total), for the admin listener's GET /metrics.
  void AddMetrics(metrics::Families* out) const;

 private:
  std::shared_ptr<const config::Config> config_;
  SteadyClock clock_;
  boost::asio::io_context ioc_{1};
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> guard_;
  LockService service_;
  LockContext ctx_;
  std::shared_ptr<proxy::Listener> listener_;
  std::thread thread_;
};

}  // namespace fencegate::locks
