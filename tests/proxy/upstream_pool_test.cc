// UpstreamPool over real loopback sockets: which idle connections it keeps
// and closes, and the pool as a Courier (fence/handoff.h): a pooled
// connection leaves one io_context with a request on it and is adopted by
// another.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <cerrno>
#include <chrono>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <string>
#include <thread>
#include <vector>

#include "proxy/upstream_pool.h"

namespace fencegate::proxy {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;

class UpstreamPoolTest : public ::testing::Test {
 protected:
  UpstreamPoolTest() {
    // Accepted sockets inherit it: a backend that reads nothing holds little,
    // so a large request cannot go whole whatever the machine's TCP buffers.
    acceptor_.set_option(asio::socket_base::receive_buffer_size(64 * 1024));
    config_.url = "http://127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port());
    config_.host = "127.0.0.1";
    config_.port = acceptor_.local_endpoint().port();
  }

  // A new connection of `pool`, not yet released; `peer` is the backend's end.
  UpstreamPool::Connection Connect(UpstreamPool& pool, asio::io_context& ioc, tcp::socket& peer) {
    UpstreamPool::Connection c;
    bool done = false;
    pool.Acquire(
        [&](error_code ec, UpstreamPool::Connection conn, bool) {
          EXPECT_FALSE(ec) << ec.message();
          c = std::move(conn);
          done = true;
        },
        /*fresh=*/true);
    ioc.restart();
    // The connect completes from the backlog, before accept. Not run():
    // the pool's idle connections are watched, which is work that stays.
    while (!done && ioc.run_one() > 0) {
    }
    if (c) acceptor_.accept(peer);
    return c;
  }

  // A new connection of `pool`, returned to it idle.
  void PoolOne(UpstreamPool& pool, asio::io_context& ioc, tcp::socket& peer) {
    UpstreamPool::Connection c = Connect(pool, ioc, peer);
    ASSERT_TRUE(c);
    pool.Release(std::move(c));
    ASSERT_EQ(pool.idle(), 1u);
  }

  // Whether the pool closed the backend's `peer` end: EOF, not "nothing yet".
  static bool Closed(tcp::socket& peer) {
    char byte;
    ssize_t n = ::recv(peer.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
  }

  asio::io_context backend_;
  tcp::acceptor acceptor_{backend_, {asio::ip::make_address("127.0.0.1"), 0}};
  config::UpstreamConfig config_;
};

TEST_F(UpstreamPoolTest, ARequestStartedOnOneIoContextIsFinishedAndAnsweredOnAnother) {
  asio::io_context mine;
  asio::io_context theirs;
  UpstreamPool from(mine, config_);
  UpstreamPool to(theirs, config_);
  tcp::socket peer(backend_);
  ASSERT_NO_FATAL_FAILURE(PoolOne(from, mine, peer));

  // More than the socket buffers hold while the backend reads nothing: the
  // courier sends what the socket takes and leaves the rest to the adopter.
  std::string request(size_t{32} << 20, 'x');
  for (size_t i = 0; i < request.size(); i += 4096) request[i] = static_cast<char>('a' + i % 26);
  std::optional<HandedConnection> handed = from.Send(request);
  ASSERT_TRUE(handed);
  const size_t sent = handed->sent;
  EXPECT_GT(sent, 0u);
  EXPECT_LT(sent, request.size());
  EXPECT_EQ(from.idle(), 0u);  // it left the sending thread's pool

  error_code ec;
  UpstreamPool::Connection adopted = to.Adopt(std::move(*handed), ec);
  ASSERT_TRUE(adopted) << ec.message();
  EXPECT_LT(handed->fd(), 0);  // the adopter owns the socket now

  // A byte short fails the backend's read below instead of hanging.
  timeval limit{.tv_sec = 10, .tv_usec = 0};
  ASSERT_EQ(::setsockopt(peer.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit), 0);
  std::string got(request.size(), '\0');
  std::thread backend([&] {
    // recv(2) itself: Asio's blocking read would wait out SO_RCVTIMEO in poll.
    for (size_t have = 0; have < got.size();) {
      ssize_t n = ::recv(peer.native_handle(), got.data() + have, got.size() - have, 0);
      if (n <= 0) {
        ADD_FAILURE() << "the backend got " << have << " of " << got.size() << " bytes";
        return peer.close();  // the answer's read below ends too
      }
      have += static_cast<size_t>(n);
    }
    error_code wec;
    asio::write(peer, asio::buffer(std::string_view("answer")), wec);
  });
  bool written = false;
  asio::async_write(*adopted, asio::buffer(request) + sent, [&](error_code wec, size_t) {
    EXPECT_FALSE(wec) << wec.message();
    written = true;
  });
  theirs.run();
  backend.join();
  ASSERT_TRUE(written);
  EXPECT_TRUE(got == request) << "the backend did not get the request byte for byte";

  char answer[6];
  asio::async_read(*adopted, asio::buffer(answer), [&](error_code rec, size_t n) {
    EXPECT_FALSE(rec) << rec.message();
    EXPECT_EQ(std::string_view(answer, n), "answer");
  });
  theirs.restart();
  theirs.run();
}

TEST_F(UpstreamPoolTest, NothingIsSentWithoutAnIdleConnection) {
  asio::io_context mine;
  UpstreamPool pool(mine, config_);
  EXPECT_FALSE(pool.Send("PUT / HTTP/1.1\r\n\r\n"));
  EXPECT_EQ(pool.idle(), 0u);
}

TEST_F(UpstreamPoolTest, ABurstBeyondTheLimitStaysIdleUntilTheLeastRecentlyUsedExcessCloses) {
  asio::io_context ioc;
  config_.max_idle_connections = 2;
  UpstreamPool pool(ioc, config_);
  std::vector<tcp::socket> peers;
  std::vector<UpstreamPool::Connection> busy;
  for (int i = 0; i < 5; ++i) {
    peers.emplace_back(backend_);
    busy.push_back(Connect(pool, ioc, peers.back()));
    ASSERT_TRUE(busy.back());
  }
  const auto released = UpstreamPool::Clock::now();
  for (auto& c : busy) pool.Release(std::move(c));  // oldest first
  EXPECT_EQ(pool.idle(), 5u);  // the burst's connections stay for its next swing
  for (auto& peer : peers) EXPECT_FALSE(Closed(peer));

  ioc.restart();
  const auto deadline = released + std::chrono::seconds(10);
  while (pool.idle() > 2 && UpstreamPool::Clock::now() < deadline) {
    ioc.run_one_until(deadline);
  }
  ASSERT_EQ(pool.idle(), 2u);
  EXPECT_GE(UpstreamPool::Clock::now() - released, UpstreamPool::kBurstGrace);
  // The three released first went; the two released last are kept.
  for (int i = 0; i < 5; ++i) EXPECT_EQ(Closed(peers[i]), i < 3) << "connection " << i;
  // The backend closes the two kept: each one's watch drops it. Then no
  // work is left: no trim waits.
  peers[3].close();
  peers[4].close();
  while (pool.idle() > 0 && UpstreamPool::Clock::now() < deadline) {
    ioc.run_one_until(deadline);
  }
  EXPECT_EQ(pool.idle(), 0u);
  ioc.poll();
  EXPECT_TRUE(ioc.stopped()) << "a trim still waits";
}

TEST_F(UpstreamPoolTest, WithALimitOfZeroNoConnectionIsKept) {
  asio::io_context ioc;
  config_.max_idle_connections = 0;
  UpstreamPool pool(ioc, config_);
  tcp::socket peer(backend_);
  UpstreamPool::Connection c = Connect(pool, ioc, peer);
  ASSERT_TRUE(c);
  pool.Release(std::move(c));
  EXPECT_EQ(pool.idle(), 0u);
  EXPECT_TRUE(Closed(peer));
}

TEST_F(UpstreamPoolTest, ClearStopsTheTrimAndClosesWhatIsReleasedAfter) {
  asio::io_context ioc;
  config_.max_idle_connections = 1;
  UpstreamPool pool(ioc, config_);
  tcp::socket first(backend_);
  tcp::socket second(backend_);
  tcp::socket late(backend_);
  UpstreamPool::Connection a = Connect(pool, ioc, first);
  UpstreamPool::Connection b = Connect(pool, ioc, second);
  UpstreamPool::Connection c = Connect(pool, ioc, late);
  ASSERT_TRUE(a && b && c);
  pool.Release(std::move(a));
  pool.Release(std::move(b));  // one beyond the limit: a trim waits
  pool.Clear();
  EXPECT_EQ(pool.idle(), 0u);
  EXPECT_TRUE(Closed(first));
  EXPECT_TRUE(Closed(second));
  // Nothing is left to wait for: a shutting-down worker's run() returns now,
  // not when the trim would have come.
  ioc.restart();
  ioc.poll();
  EXPECT_TRUE(ioc.stopped());
  pool.Release(std::move(c));
  EXPECT_EQ(pool.idle(), 0u);
  EXPECT_TRUE(Closed(late));
}

// Waits (poll, with a deadline) until the pool's end of `c` has something
// to read: what the backend wrote has arrived.
bool Readable(UpstreamPool::Connection& c) {
  pollfd p{c->socket().native_handle(), POLLIN, 0};
  return ::poll(&p, 1, 10'000) == 1;
}

TEST_F(UpstreamPoolTest, AConnectionWithBytesWaitingIsClosedNotPooled) {
  asio::io_context ioc;
  UpstreamPool pool(ioc, config_);
  tcp::socket clean(backend_);
  tcp::socket stray(backend_);
  tcp::socket closed(backend_);
  UpstreamPool::Connection a = Connect(pool, ioc, clean);
  UpstreamPool::Connection b = Connect(pool, ioc, stray);
  UpstreamPool::Connection c = Connect(pool, ioc, closed);
  ASSERT_TRUE(a && b && c);

  EXPECT_EQ(pool.Release(std::move(a)), UpstreamPool::Unread::kNothing);
  EXPECT_EQ(pool.idle(), 1u);
  EXPECT_FALSE(Closed(clean));

  // A response the backend sent beyond the one just read: handed to the
  // next request, it would be taken for that request's answer.
  asio::write(stray,
              asio::buffer(std::string_view("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")));
  ASSERT_TRUE(Readable(b));
  EXPECT_EQ(pool.Release(std::move(b)), UpstreamPool::Unread::kBytes);
  EXPECT_EQ(pool.idle(), 1u);
  EXPECT_TRUE(Closed(stray));

  closed.shutdown(tcp::socket::shutdown_send);
  ASSERT_TRUE(Readable(c));
  EXPECT_EQ(pool.Release(std::move(c)), UpstreamPool::Unread::kClosed);
  EXPECT_EQ(pool.idle(), 1u);
}

TEST_F(UpstreamPoolTest, WhatTheBackendSendsOnAnIdleConnectionDropsIt) {
  asio::io_context ioc;
  UpstreamPool pool(ioc, config_);
  tcp::socket quiet(backend_);
  tcp::socket late(backend_);
  UpstreamPool::Connection a = Connect(pool, ioc, quiet);
  UpstreamPool::Connection b = Connect(pool, ioc, late);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(pool.Release(std::move(a)), UpstreamPool::Unread::kNothing);
  EXPECT_EQ(pool.Release(std::move(b)), UpstreamPool::Unread::kNothing);
  ASSERT_EQ(pool.idle(), 2u);

  // A late second response, after the connection went back to the pool:
  // the event loop sees it and the pool closes that connection, before any
  // request can take it.
  asio::write(late,
              asio::buffer(std::string_view("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")));
  const auto deadline = UpstreamPool::Clock::now() + std::chrono::seconds(10);
  ioc.restart();
  while (pool.idle() > 1 && UpstreamPool::Clock::now() < deadline) ioc.run_one_until(deadline);
  ASSERT_EQ(pool.idle(), 1u);
  EXPECT_EQ(pool.counters().dropped.load(), 1u);
  EXPECT_TRUE(Closed(late));
  EXPECT_FALSE(Closed(quiet));

  // The quiet one is handed out; its cancelled watch does not close it
  // later, and bytes on it now are its exchange's.
  UpstreamPool::Connection taken;
  pool.Acquire([&](error_code ec, UpstreamPool::Connection c, bool reused) {
    EXPECT_FALSE(ec);
    EXPECT_TRUE(reused);
    taken = std::move(c);
  });
  ASSERT_TRUE(taken);
  asio::write(quiet, asio::buffer(std::string_view("x")));
  ASSERT_TRUE(Readable(taken));
  ioc.poll();
  EXPECT_EQ(pool.counters().dropped.load(), 1u);
  EXPECT_FALSE(Closed(quiet));
  EXPECT_TRUE(taken->socket().is_open());
}

}  // namespace
}  // namespace fencegate::proxy
