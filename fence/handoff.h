#pragma once
// Handing a fenced write's upstream exchange across I/O threads (a hot key,
// one that many clients write at once; docs/architecture.md, "Moving a
// session to its key's thread"): the thread that hands the key on
// (KeyLease::HandOn) may be a Courier that sends the next write's request
// on one of its own upstream connections and gives that connection, request
// in flight, to the waiter's thread.
//
// Nothing here is about correctness: a write goes upstream only with its
// key's turn either way, and the connection it went on goes with the turn.

#include <unistd.h>

#include <boost/system/error_code.hpp>
#include <chrono>
#include <cstddef>
#include <optional>
#include <string_view>
#include <utility>

namespace fencegate::proxy {

// A connection on its way from one I/O thread to another (an upstream
// connection with a request in flight, or a client connection that moves to
// the thread of its keys): a socket no io_context watches, closed unless
// someone adopts it (MoveInto). An Asio socket cannot change io_context, so
// what travels is the descriptor, owned by this object from From() to
// MoveInto().
class HandedConnection {
  int fd_ = -1;
  bool ipv6_ = false;

 public:
  HandedConnection() = default;
  HandedConnection(int fd, bool ipv6) : fd_(fd), ipv6_(ipv6) {}
  HandedConnection(HandedConnection&& other) noexcept
      : fd_(std::exchange(other.fd_, -1)),
        ipv6_(other.ipv6_),
        sent(other.sent),
        sent_at(other.sent_at) {}
  HandedConnection& operator=(HandedConnection&& other) noexcept {
    if (this != &other) {
      Close();
      fd_ = std::exchange(other.fd_, -1);
      ipv6_ = other.ipv6_;
      sent = other.sent;
      sent_at = other.sent_at;
    }
    return *this;
  }
  HandedConnection(const HandedConnection&) = delete;
  HandedConnection& operator=(const HandedConnection&) = delete;
  ~HandedConnection() { Close(); }

  // Takes `socket`, an open Asio TCP socket, off its io_context without
  // closing it (release). On failure `ec` says why, the result holds
  // nothing, and the socket stays with its owner.
  template <class Socket>
  static HandedConnection From(Socket& socket, boost::system::error_code& ec) {
    const bool ipv6 = socket.local_endpoint(ec).address().is_v6();
    if (ec) return {};
    const int fd = socket.release(ec);
    if (ec) return {};
    return {fd, ipv6};
  }
  // Gives the connection to `socket`, an unopened Asio TCP socket of the
  // adopting thread's io_context, which owns it from now on. On failure
  // `ec` says why and the connection stays here (closed with this object).
  template <class Socket>
  void MoveInto(Socket& socket, boost::system::error_code& ec) {
    using Protocol = typename Socket::protocol_type;
    socket.assign(ipv6_ ? Protocol::v6() : Protocol::v4(), fd_, ec);
    if (!ec) fd_ = -1;
  }

  // The descriptor, for a send before the hand-over (UpstreamPool::Send).
  int fd() const { return fd_; }
  bool ipv6() const { return ipv6_; }

  // How many bytes of the request went (all of them, or the first part when
  // the socket would not take more at once: the adopter writes the rest),
  // and when.
  size_t sent = 0;
  std::chrono::steady_clock::time_point sent_at;

 private:
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
};

// What a thread that hands a key on lends the key's next write when that
// write belongs to another thread (KeyLease::HandOn).
class Courier {
 public:
  virtual ~Courier() = default;
  // Sends `request` (a whole upstream request) now, on a live idle upstream
  // connection of this thread, and gives the connection up. Nothing when it
  // cannot (no idle connection, a TLS upstream, or the send failed before
  // the whole request went: then that connection is closed, the backend
  // never saw a complete request, and the write goes the usual way).
  virtual std::optional<HandedConnection> Send(std::string_view request) = 0;
};

}  // namespace fencegate::proxy
