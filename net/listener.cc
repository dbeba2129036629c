#include "net/listener.h"

#include <spdlog/spdlog.h>

#include <boost/asio/post.hpp>

namespace fencegate::proxy {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

Listener::Listener(asio::io_context& accept_ioc, std::vector<asio::io_context*> workers,
                   SessionFactory factory)
    : acceptor_(accept_ioc), backoff_(accept_ioc), workers_(std::move(workers)), factory_(std::move(factory)) {}

bool Listener::Open(const tcp::endpoint& endpoint, std::string* error) {
  boost::system::error_code ec;
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    *error = "cannot listen on " + endpoint.address().to_string() + ":" +
             std::to_string(endpoint.port()) + ": " + ec.message();
    return false;
  }
  return true;
}

tcp::endpoint Listener::local_endpoint() const {
  boost::system::error_code ec;
  return acceptor_.local_endpoint(ec);
}

void Listener::Run() { DoAccept(); }

void Listener::Stop() {
  boost::system::error_code ignored;
  acceptor_.close(ignored);
}

void Listener::DoAccept() {
  size_t index = next_++ % workers_.size();
  acceptor_.async_accept(
      *workers_[index], [self = shared_from_this(), index](boost::system::error_code ec,
                                                          Socket socket) {
        if (ec == asio::error::operation_aborted || !self->acceptor_.is_open()) return;
        if (ec) {
          // EMFILE and friends: log and keep accepting; the pending
          // connection stays in the backlog until a descriptor frees up.
          spdlog::warn("accept failed: {}", ec.message());
          self->backoff_.expires_after(std::chrono::milliseconds(50));
          self->backoff_.async_wait([self](boost::system::error_code) {
            if (self->acceptor_.is_open()) self->DoAccept();
          });
          return;
        } else {
          asio::post(*self->workers_[index], [self, index, s = std::move(socket)]() mutable {
            self->factory_(std::move(s), index);
          });
        }
        self->DoAccept();
      });
}

}  // namespace fencegate::proxy
