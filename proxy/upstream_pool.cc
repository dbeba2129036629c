#include "proxy/upstream_pool.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

#include <boost/asio/connect.hpp>
#include <openssl/bio.h>
#include <openssl/ssl.h>

#include "tls/tls_context.h"

namespace fencegate::proxy {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;

UpstreamPool::UpstreamPool(asio::io_context& ioc, const config::UpstreamConfig& config,
                           asio::ssl::context* tls)
    : ioc_(ioc),
      config_(config),
      tls_(tls),
      server_name_(config.tls.server_name.empty() ? config.host : config.tls.server_name),
      resolver_(ioc),
      trim_timer_(ioc) {
  boost::system::error_code ec;
  auto address = asio::ip::make_address(config_.host, ec);
  if (!ec) literal_ = tcp::endpoint(address, config_.port);
}

namespace {

// A request that must not be sent on a dead connection (a fenced write, or
// any request the session would not retry) always has its pooled
// connection probed (one recv syscall): it catches a close the backend sent
// while the connection sat idle, which is how backends end idle keep-alive
// connections (tests/integration/test_http_connections.py holds this).
//
// A retryable request (GET/HEAD without a body) skips the probe when the
// connection was released less than kProbeAfter ago: if that connection
// turns out dead, the session retries once on a new connection, and
// PruneDead() then sweeps the other idle ones. Backends close idle
// connections on a timer of seconds (gunicorn 2 s; Node.js, Apache,
// uvicorn 5 s; nginx 75 s), so a connection used within the last second is
// almost never dead, and probing it would cost a syscall on every request
// of a busy pool to save a rare retry. An older one has a real chance of
// having been timed out, and there the probe is cheaper than the retry.
constexpr std::chrono::milliseconds kProbeAfter{1000};

}  // namespace

UpstreamPool::Unread UpstreamPool::Peek(Stream& stream) {
  // An idle keep-alive connection must have nothing to read: EOF means the
  // backend closed it, bytes mean it sent something unasked. Either way it
  // cannot carry the next exchange.
  if (auto* tls = stream.tls_stream()) {
    // Records read off the socket but not yet taken by a read (decrypted or
    // not), or bytes handed to OpenSSL's input BIO that it has not read yet.
    SSL* ssl = tls->native_handle();
    if (SSL_has_pending(ssl) == 1 || BIO_ctrl_pending(SSL_get_rbio(ssl)) > 0) {
      return Unread::kBytes;
    }
  }
  char byte;
  ssize_t n = ::recv(stream.socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return Unread::kBytes;
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Unread::kNothing;
  return Unread::kClosed;
}

UpstreamPool::Connection UpstreamPool::TakeIdle(bool probe) {
  std::optional<Clock::time_point> now;
  while (!idle_.empty()) {
    Connection c = std::move(idle_.back().connection);
    Clock::time_point since = idle_.back().since;
    idle_.pop_back();
    beast::error_code ignored;
    c->socket().cancel(ignored);  // its watch: the handler finds it gone
    if (!now) now = Clock::now();
    if ((!probe && *now - since < kProbeAfter) || LooksAlive(*c)) {
      Bump(counters_.reused);
      return c;
    }
    Bump(counters_.dropped);
    c->socket().close(ignored);
  }
  return nullptr;
}

void UpstreamPool::Acquire(Handler handler, bool fresh, bool probe) {
  if (!fresh) {
    if (Connection c = TakeIdle(probe)) {
      return handler({}, std::move(c), true);  // at once: no trip through the event loop
    }
  }
  Connect(std::move(handler));
}

std::optional<HandedConnection> UpstreamPool::Send(std::string_view request) {
  if (tls_ != nullptr) return std::nullopt;  // TLS state lives in this thread's stream object
  Connection c = TakeIdle(/*probe=*/true);
  if (!c) return std::nullopt;
  // Off this io_context first (release: no longer watched, not closed), so
  // that once bytes went nothing can fail but the send itself.
  beast::error_code ec;
  HandedConnection handed = HandedConnection::From(c->socket(), ec);
  if (ec) return std::nullopt;  // `c` closes it: nothing was sent
  c.reset();
  while (handed.sent < request.size()) {
    ssize_t n = ::send(handed.fd(), request.data() + handed.sent, request.size() - handed.sent,
                       MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      handed.sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;  // the adopter writes the rest
    // The backend has at most part of the request, and `handed` closes the
    // connection under it: it can never complete. The write goes its usual
    // way, on another connection.
    return std::nullopt;
  }
  handed.sent_at = Clock::now();
  return handed;
}

UpstreamPool::Connection UpstreamPool::Adopt(HandedConnection handed, beast::error_code& ec) {
  auto c = std::make_unique<Stream>(Tcp(ioc_), nullptr);
  handed.MoveInto(c->socket(), ec);
  if (ec) return nullptr;  // `handed` still owns the socket and closes it
  c->socket().non_blocking(true, ec);  // as Connect sets it, for the write-now path
  if (ec) return nullptr;
  return c;
}

void UpstreamPool::Connect(Handler handler) {
  // Counted when the connect (and a TLS handshake) ends; connects are the
  // rare case, so the wrapper costs what reuse does not.
  handler = [this, handler = std::move(handler)](beast::error_code ec, Connection c,
                                                  bool reused) mutable {
    Bump(ec ? counters_.connect_failures : counters_.opened);
    handler(ec, std::move(c), reused);
  };
  auto stream =
      std::make_shared<Connection>(std::make_unique<Stream>(Tcp(ioc_), tls_));
  (*stream)->expires_after(config_.connect_timeout);  // the TLS handshake included
  auto connected = [this, stream, handler = std::move(handler)](beast::error_code ec) mutable {
    if (ec) return handler(ec, nullptr, false);
    beast::error_code ignored;
    (*stream)->socket().set_option(tcp::no_delay(true), ignored);
    if ((*stream)->tls()) return Handshake(stream, std::move(handler));
    // The session tries each write at once before it waits (TryWriteNow).
    (*stream)->socket().non_blocking(true, ignored);
    (*stream)->expires_never();
    handler({}, std::move(*stream), false);
  };
  if (literal_) {
    (*stream)->tcp().async_connect(*literal_, std::move(connected));
    return;
  }
  resolver_.async_resolve(
      config_.host, std::to_string(config_.port),
      [stream, connected = std::move(connected)](
          beast::error_code ec, const tcp::resolver::results_type& results) mutable {
        if (ec) return connected(ec);
        (*stream)->tcp().async_connect(results,
                                 [connected = std::move(connected)](
                                     beast::error_code ec, const tcp::endpoint&) mutable {
                                   connected(ec);
                                 });
      });
}

void UpstreamPool::Handshake(const std::shared_ptr<Connection>& stream, Handler handler) {
  Stream::Tls& tls = *(*stream)->tls_stream();
  beast::error_code ec;
  if (!tls::PrepareClient(tls.native_handle(), server_name_, config_.tls.verify, &ec)) {
    return handler(ec, nullptr, false);
  }
  tls.async_handshake(asio::ssl::stream_base::client,
                      [stream, handler = std::move(handler)](beast::error_code ec) mutable {
                        if (ec) {
                          ec = tls::DescribeHandshakeError(
                              (*stream)->tls_stream()->native_handle(), ec);
                          return handler(ec, nullptr, false);
                        }
                        // Bytes go through OpenSSL only: no user non-blocking
                        // mode, so no write-now path writes to the bare socket.
                        beast::error_code ignored;
                        (*stream)->socket().non_blocking(false, ignored);
                        (*stream)->expires_never();
                        handler({}, std::move(*stream), false);
                      });
}

UpstreamPool::Unread UpstreamPool::Release(Connection connection) {
  if (!connection) return Unread::kNothing;
  // One recv per connection pooled: the bytes a backend sends beyond a
  // response come with it or right after it, and the probe before reuse is
  // skipped for a retryable request on a connection released moments ago
  // (kProbeAfter), so this is where they are caught.
  const bool keep = !cleared_ && config_.max_idle_connections > 0;
  const Unread unread = keep ? Peek(*connection) : Unread::kNothing;
  if (!keep || unread != Unread::kNothing) {
    beast::error_code ignored;
    connection->socket().shutdown(tcp::socket::shutdown_both, ignored);
    connection->socket().close(ignored);
    return unread;
  }
  connection->expires_never();
  idle_.push_back(Idle{std::move(connection), Clock::now(), next_idle_id_++});
  Watch(idle_.back());
  if (idle_.size() > config_.max_idle_connections && !trim_pending_) ScheduleTrim();
  return Unread::kNothing;
}

void UpstreamPool::Watch(const Idle& entry) {
  // The socket is registered with the reactor already: the wait queues an
  // operation and costs no system call. Peek above saw nothing, and bytes
  // arriving from here on raise a new readiness event.
  entry.connection->socket().async_wait(
      tcp::socket::wait_read, [this, id = entry.id](const boost::system::error_code& ec) {
        if (ec == asio::error::operation_aborted) return;  // taken, trimmed or closed
        OnIdleReadable(id);
      });
}

void UpstreamPool::OnIdleReadable(uint64_t id) {
  auto it = std::find_if(idle_.begin(), idle_.end(), [id](const Idle& e) { return e.id == id; });
  if (it == idle_.end()) return;
  // An idle connection has nothing to say: this is a close, or bytes nobody
  // asked for (a late response, a 408 before a close), which a request
  // reusing it would take for its answer.
  Bump(counters_.dropped);
  beast::error_code ignored;
  it->connection->socket().close(ignored);
  idle_.erase(it);
}

void UpstreamPool::ScheduleTrim() {
  trim_pending_ = true;
  trim_timer_.expires_at(idle_.front().since + kBurstGrace);
  trim_timer_.async_wait([this](const boost::system::error_code& ec) {
    trim_pending_ = false;
    if (!ec) TrimExcess();
  });
}

// Under a load above the limit the number of exchanges under way swings
// from moment to moment, and a hard cap closes connections on every swing
// down and connects new ones on the next swing up: measured with 256 client
// connections on 2 threads (64 idle each), one upstream connect and close
// per 4-5 requests, in nginx with `keepalive 64` as in fencegate; without
// them fencegate's CPU per GET there is 0.62-0.74 of what it is with them
// (docs/performance.md). So the excess stays while it is used: idle_ is
// oldest first and reuse takes the newest, so a connection at the front that
// has sat there for kBurstGrace has not been needed by the last second's load
// and goes.
void UpstreamPool::TrimExcess() {
  const Clock::time_point now = Clock::now();
  size_t excess = idle_.size() > config_.max_idle_connections
                      ? idle_.size() - config_.max_idle_connections
                      : 0;
  size_t closed = 0;
  while (closed < excess && now - idle_[closed].since >= kBurstGrace) {
    beast::error_code ignored;
    idle_[closed].connection->socket().shutdown(tcp::socket::shutdown_both, ignored);
    idle_[closed].connection->socket().close(ignored);
    ++closed;
  }
  idle_.erase(idle_.begin(), idle_.begin() + static_cast<std::ptrdiff_t>(closed));
  if (closed < excess) ScheduleTrim();
}

void UpstreamPool::PruneDead() {
  std::erase_if(idle_, [](Idle& entry) {
    if (LooksAlive(*entry.connection)) return false;
    beast::error_code ignored;
    entry.connection->socket().close(ignored);
    return true;
  });
}

void UpstreamPool::Clear() {
  cleared_ = true;
  trim_timer_.cancel();
  for (auto& entry : idle_) {
    beast::error_code ignored;
    entry.connection->socket().close(ignored);
  }
  idle_.clear();
}

}  // namespace fencegate::proxy
