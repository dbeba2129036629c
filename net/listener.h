#pragma once
// Listener: accepts connections on one endpoint and hands each socket to a
// factory, round-robin over the workers' io_contexts (one worker thread per
// io_context, so a session never needs a strand).

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace fencegate::proxy {

class Listener : public std::enable_shared_from_this<Listener> {
 public:
  // The accepted socket, bound to its worker's io_context by its concrete
  // executor type (no type-erased executor in the session's hot path).
  using Socket = boost::asio::basic_stream_socket<boost::asio::ip::tcp,
                                                  boost::asio::io_context::executor_type>;
  // Called on the chosen worker's io_context with the accepted socket and
  // that worker's index.
  using SessionFactory = std::function<void(Socket&&, size_t worker)>;

  Listener(boost::asio::io_context& accept_ioc, std::vector<boost::asio::io_context*> workers,
           SessionFactory factory);

  // Binds and listens; false + *error on failure (address in use, ...).
  bool Open(const boost::asio::ip::tcp::endpoint& endpoint, std::string* error);
  void Run();
  void Stop();  // stops accepting; safe from the accept io_context's thread
  boost::asio::ip::tcp::endpoint local_endpoint() const;

 private:
  void DoAccept();

  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::steady_timer backoff_;  // after an accept error (EMFILE): pause, then retry
  std::vector<boost::asio::io_context*> workers_;
  SessionFactory factory_;
  size_t next_ = 0;
};

}  // namespace fencegate::proxy
