// UpstreamPool as a Courier (proxy/handoff.h): a pooled connection leaves
// one io_context with a request on it and is adopted by another, over real
// loopback sockets.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <string>
#include <thread>

#include "proxy/upstream_pool.h"

namespace fencegate::proxy {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;

class UpstreamHandoffTest : public ::testing::Test {
 protected:
  UpstreamHandoffTest() {
    // Accepted sockets inherit it: a backend that reads nothing holds little,
    // so a large request cannot go whole whatever the machine's TCP buffers.
    acceptor_.set_option(asio::socket_base::receive_buffer_size(64 * 1024));
    config_.url = "http://127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port());
    config_.host = "127.0.0.1";
    config_.port = acceptor_.local_endpoint().port();
  }

  // A new connection of `pool`, returned to it idle; `peer` is the
  // backend's end.
  void PoolOne(UpstreamPool& pool, asio::io_context& ioc, tcp::socket& peer) {
    UpstreamPool::Connection c;
    pool.Acquire([&](error_code ec, UpstreamPool::Connection conn, bool) {
      ASSERT_FALSE(ec) << ec.message();
      c = std::move(conn);
    });
    ioc.restart();
    ioc.run();  // the connect completes from the backlog, before accept
    ASSERT_TRUE(c);
    acceptor_.accept(peer);
    pool.Release(std::move(c));
    ASSERT_EQ(pool.idle(), 1u);
  }

  asio::io_context backend_;
  tcp::acceptor acceptor_{backend_, {asio::ip::make_address("127.0.0.1"), 0}};
  config::UpstreamConfig config_;
};

TEST_F(UpstreamHandoffTest, ARequestStartedOnOneIoContextIsFinishedAndAnsweredOnAnother) {
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

TEST_F(UpstreamHandoffTest, NothingIsSentWithoutAnIdleConnection) {
  asio::io_context mine;
  UpstreamPool pool(mine, config_);
  EXPECT_FALSE(pool.Send("PUT / HTTP/1.1\r\n\r\n"));
  EXPECT_EQ(pool.idle(), 0u);
}

}  // namespace
}  // namespace fencegate::proxy
