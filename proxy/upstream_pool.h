#pragma once
// UpstreamPool: keep-alive connections to the one upstream, owned by one
// worker thread (one io_context, one pool: no locks). Idle connections are
// reused newest first. When it comes back after an exchange, and again
// before reuse, a connection is checked for a close or stray bytes from the
// backend, and such a connection is dropped rather than handed out, so a
// fenced write is not sent on a connection that is dead and no request
// reads bytes sent before it as its answer; a retryable request skips the
// check before reuse on a recently used connection (see kProbeAfter in the
// source). While it sits idle a connection is watched by the event loop
// (a wait for readability, no system call of its own): whatever the backend
// sends on it then (a late second response, a 408 before it closes, a
// close) drops it at once, as nginx does with its cached upstream
// connections, so those bytes never reach a client.
//
// max_idle_connections is what stays idle once a burst has passed: a
// connection released while that many are already idle is kept too, and
// the excess, least recently used first, is closed after it has sat idle
// for kBurstGrace (see the source). A hard cap closes connections at every
// swing of a load above it and opens them again moments later.

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "config/config.h"
#include "fence/handoff.h"
#include "net/maybe_tls_stream.h"

namespace fencegate::proxy {

// The pool is also its thread's Courier (fence/handoff.h): a session that hands
// a key on lends it to the key's next write of another thread.
class UpstreamPool final : public Courier {
 public:
  // The worker's concrete executor: no type-erased executor on the hot path.
  using Executor = boost::asio::io_context::executor_type;
  using Tcp = boost::beast::basic_stream<boost::asio::ip::tcp, Executor>;
  using Stream = MaybeTlsStream<Tcp>;  // plain, or TLS for an https upstream
  using Connection = std::unique_ptr<Stream>;
  // Called on the pool's io_context: inside Acquire for a pooled connection
  // (`reused`), later for a new one.
  using Handler = std::function<void(boost::beast::error_code, Connection, bool reused)>;

  // `tls`: the client context for an https upstream (tls/), else nullptr.
  UpstreamPool(boost::asio::io_context& ioc, const config::UpstreamConfig& config,
               boost::asio::ssl::context* tls = nullptr);

  // Hands out a live idle connection (unless `fresh`), or connects a new one
  // within connect_timeout, TLS handshake included (error: beast::error::timeout,
  // the connect error, or for a refused certificate one in the "tls-verify"
  // category that says why).
  // `probe`: always check a pooled connection before handing it out; pass
  // false only for a request the caller retries on a new connection when
  // the pooled one fails.
  void Acquire(Handler handler, bool fresh = false, bool probe = true);

  // Courier: a probed idle connection (as Acquire with probe), taken off
  // this io_context, with `request` sent on it now as far as the socket
  // takes it. Plain TCP only: nothing for a TLS upstream.
  std::optional<HandedConnection> Send(std::string_view request) override;
  // The other end of Send: the connection watched by this pool's io_context
  // from now on, in non-blocking mode like any of the pool's.
  Connection Adopt(HandedConnection handed, boost::beast::error_code& ec);

  // What is waiting to be read on a connection, looked at without taking
  // it: nothing (it may carry an exchange), bytes, or a close (EOF or a
  // socket error). For TLS, bytes already in the TLS layer's buffers count.
  enum class Unread { kNothing, kBytes, kClosed };
  static Unread Peek(Stream& stream);

  // Returns a connection that finished a complete exchange and may be
  // reused. It is pooled only when nothing is waiting to be read on it:
  // bytes there (the backend sent more than the response it framed) would
  // be read as the next request's response, so such a connection is
  // closed, as is one the backend closed. Returns what was found (kNothing
  // also when the pool closes it for its limit or Clear). Idle connections
  // beyond max_idle_connections are closed once they have been idle for
  // kBurstGrace (at once when the limit is 0).
  Unread Release(Connection connection);

  // A reused connection just failed: the backend may have restarted and
  // closed every other one too. Checks every idle connection now and drops
  // the dead ones, so the next requests do not find them one by one.
  void PruneDead();

  // A reload: connect_timeout and max_idle_connections from `next` apply
  // from now on (the address and TLS change only with a restart). On the
  // pool's io_context.
  void Retune(const config::UpstreamConfig& next) {
    config_.connect_timeout = next.connect_timeout;
    config_.timeout = next.timeout;
    config_.max_idle_connections = next.max_idle_connections;
  }

  size_t idle() const { return idle_.size(); }

  // What the pool counted since it started. Written by the pool's thread
  // only, read by the metrics endpoint from any thread.
  struct Counters {
    std::atomic<uint64_t> opened{0};            // new connections, TLS handshake included
    std::atomic<uint64_t> connect_failures{0};  // connects (or handshakes) that failed
    std::atomic<uint64_t> reused{0};            // idle connections handed out again
    std::atomic<uint64_t> dropped{0};           // idle connections found closed or dirty
  };
  const Counters& counters() const { return counters_; }
  // Closes every idle connection, and from now on every released one
  // (shutdown).
  void Clear();

  using Clock = std::chrono::steady_clock;
  // How long an idle connection beyond max_idle_connections is kept.
  static constexpr std::chrono::milliseconds kBurstGrace{1000};

 private:
  struct Idle {
    Connection connection;
    Clock::time_point since;  // when it was released
    uint64_t id;              // names it to its watch (Watch)
  };
  // The newest idle connection that passes the probe (or, without `probe`,
  // was released less than kProbeAfter ago); dead ones are closed on the way.
  Connection TakeIdle(bool probe);
  void Connect(Handler handler);
  void Handshake(const std::shared_ptr<Connection>& stream, Handler handler);
  static bool LooksAlive(Stream& stream) { return Peek(stream) == Unread::kNothing; }
  // Waits for the idle connection `entry` to become readable; if it is still
  // idle then (not taken, trimmed or cleared meanwhile), it is closed.
  void Watch(const Idle& entry);
  void OnIdleReadable(uint64_t id);
  // One writer (the pool's thread): a plain load and store.
  static void Bump(std::atomic<uint64_t>& a) {
    a.store(a.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  // Closes the idle connections beyond the limit that have been idle for
  // kBurstGrace, and waits for the next one to reach it while any remain.
  void TrimExcess();
  // Runs TrimExcess when the oldest idle connection reaches kBurstGrace.
  void ScheduleTrim();

  boost::asio::io_context& ioc_;
  config::UpstreamConfig config_;  // a copy: Retune changes it
  boost::asio::ssl::context* tls_;  // nullptr: plain HTTP
  std::string server_name_;         // SNI and the name verified (TLS only)
  boost::asio::ip::tcp::resolver resolver_;
  std::optional<boost::asio::ip::tcp::endpoint> literal_;  // host was an IP literal: no DNS
  std::vector<Idle> idle_;  // oldest first; owned by the io_context's thread
  boost::asio::steady_timer trim_timer_;
  bool trim_pending_ = false;
  uint64_t next_idle_id_ = 0;
  bool cleared_ = false;
  Counters counters_;
};

}  // namespace fencegate::proxy
