#include "proxy/upstream_pool.h"

#include <sys/socket.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/post.hpp>

namespace fencegate::proxy {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;

UpstreamPool::UpstreamPool(asio::io_context& ioc, const config::UpstreamConfig& config)
    : ioc_(ioc), config_(config), resolver_(ioc) {
  boost::system::error_code ec;
  auto address = asio::ip::make_address(config_.host, ec);
  if (!ec) literal_ = tcp::endpoint(address, config_.port);
}

bool UpstreamPool::LooksAlive(Stream& stream) {
  // An idle keep-alive connection must have nothing to read: EOF means the
  // backend closed it, bytes mean it sent something unasked. Either way it
  // cannot carry the next exchange.
  char byte;
  ssize_t n = ::recv(stream.socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

void UpstreamPool::Acquire(Handler handler, bool fresh) {
  while (!fresh && !idle_.empty()) {
    Connection c = std::move(idle_.back());
    idle_.pop_back();
    if (LooksAlive(*c)) {
      asio::post(ioc_, [h = std::move(handler), c = std::move(c)]() mutable {
        h({}, std::move(c), true);
      });
      return;
    }
    beast::error_code ignored;
    c->socket().close(ignored);
  }
  Connect(std::move(handler));
}

void UpstreamPool::Connect(Handler handler) {
  auto stream = std::make_shared<Connection>(std::make_unique<Stream>(ioc_));
  (*stream)->expires_after(config_.connect_timeout);
  auto connected = [stream, handler](beast::error_code ec) mutable {
    if (ec) return handler(ec, nullptr, false);
    beast::error_code ignored;
    (*stream)->socket().set_option(tcp::no_delay(true), ignored);
    (*stream)->expires_never();
    handler({}, std::move(*stream), false);
  };
  if (literal_) {
    (*stream)->async_connect(*literal_, std::move(connected));
    return;
  }
  resolver_.async_resolve(
      config_.host, std::to_string(config_.port),
      [stream, connected = std::move(connected)](beast::error_code ec,
                                                 tcp::resolver::results_type results) mutable {
        if (ec) return connected(ec);
        (*stream)->async_connect(results,
                                 [connected = std::move(connected)](
                                     beast::error_code ec, const tcp::endpoint&) mutable {
                                   connected(ec);
                                 });
      });
}

void UpstreamPool::Release(Connection connection) {
  if (!connection) return;
  connection->expires_never();
  if (idle_.size() >= config_.max_idle_connections) {
    beast::error_code ignored;
    connection->socket().shutdown(tcp::socket::shutdown_both, ignored);
    connection->socket().close(ignored);
    return;
  }
  idle_.push_back(std::move(connection));
}

void UpstreamPool::Clear() {
  for (auto& c : idle_) {
    beast::error_code ignored;
    c->socket().close(ignored);
  }
  idle_.clear();
}

}  // namespace fencegate::proxy
