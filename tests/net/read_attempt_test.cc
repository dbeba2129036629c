// SkipNextReadAttempt (net/read_attempt.h) on real loopback sockets, with
// the io_context run in the test thread so that each event loop turn is
// explicit. The backend's end is a blocking socket of its own, driven by the
// test; ::poll on the proxy's descriptor waits for bytes to have arrived
// (it is level-triggered and leaves the reactor's edge-triggered epoll
// alone).

#include "net/read_attempt.h"

#include <gtest/gtest.h>
#include <poll.h>

#include <array>
#include <boost/asio/basic_stream_socket.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace fencegate::proxy {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Socket = asio::basic_stream_socket<tcp, asio::io_context::executor_type>;
using boost::system::error_code;

constexpr auto kGuard = std::chrono::seconds(20);  // a failure bound, never a wait

// `proxy` (non-blocking, on `ioc`, as an upstream connection of the proxy)
// connected to `backend` (blocking, on an io_context nobody runs).
struct Connection {
  Connection() : proxy(ioc.get_executor()), backend(backend_ioc) {
    tcp::acceptor acceptor(backend_ioc, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
    proxy.connect(acceptor.local_endpoint());
    acceptor.accept(backend);
    proxy.non_blocking(true);
  }

  // Blocks until the proxy's end has bytes (or a close) to read.
  void WaitReadable() {
    pollfd p{proxy.native_handle(), POLLIN, 0};
    ASSERT_EQ(::poll(&p, 1, -1), 1);
  }

  void SendRequest() {
    static constexpr std::string_view kRequest = "GET / HTTP/1.1\r\nHost: b\r\n\r\n";
    ASSERT_EQ(proxy.write_some(asio::buffer(kRequest.data(), kRequest.size())), kRequest.size());
  }

  void BackendAnswers(std::string_view bytes) {
    if (request.empty()) {
      request.resize(64);
      request.resize(backend.read_some(asio::buffer(request)));
    }
    asio::write(backend, asio::buffer(bytes.data(), bytes.size()));
  }

  void StartRead() {
    proxy.async_read_some(asio::buffer(buffer), [this](error_code ec, size_t n) {
      result = ec;
      got.assign(buffer.data(), n);
    });
  }

  // Runs the loop until the queued read completes; it must have read `want`.
  void ExpectRead(std::string_view want, std::string_view why_it_must) {
    ioc.run_one_for(kGuard);
    ASSERT_TRUE(result.has_value()) << why_it_must << ", yet the read never completed";
    EXPECT_FALSE(*result) << result->message();
    EXPECT_EQ(got, want);
  }
  asio::io_context ioc{1};  // as the proxy's: one thread per io_context
  asio::io_context backend_ioc;
  Socket proxy;
  tcp::socket backend;
  std::string request;
  std::array<char, 256> buffer{};
  std::optional<error_code> result;
  std::string got;
};

TEST(ReadAttempt, TheBuildSkipsItExactlyWhenConfiguredTo) {
  // FENCEGATE_SKIP_READ_ATTEMPT is on by default: the skip must then work,
  // or every proxied request pays an empty recvmsg again.
#ifdef FENCEGATE_SKIP_READ_ATTEMPT
  EXPECT_TRUE(CanSkipReadAttempt());
#else
  EXPECT_FALSE(CanSkipReadAttempt());
#endif
}

TEST(ReadAttempt, AResponseAfterTheSkipCompletesTheRead) {
  Connection c;
  c.SendRequest();
  EXPECT_EQ(SkipNextReadAttempt(c.proxy), CanSkipReadAttempt());
  c.StartRead();
  c.BackendAnswers("HTTP/1.1 204 No Content\r\n\r\n");
  c.ExpectRead("HTTP/1.1 204 No Content\r\n\r\n", "the response arrived");
}

TEST(ReadAttempt, AResponseThatCameBeforeTheSkipWithNoLoopTurnIsRead) {
  // A fast backend: its answer is in before the proxy's handler got to
  // clearing the flag. The event it raised has not been seen by the loop.
  Connection c;
  c.SendRequest();
  c.BackendAnswers("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
  c.WaitReadable();
  SkipNextReadAttempt(c.proxy);
  c.StartRead();
  c.ExpectRead("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", "bytes were there");
}

TEST(ReadAttempt, AnEventTheLoopHasSeenIsForgottenSoTheReadWaitsForTheNext) {
  // The precondition of read_attempt.h, shown: bytes whose event the loop
  // delivered with no read queued are not read after the skip until more
  // bytes come. This is also what proves the skip happened.
  Connection c;
  auto guard = asio::make_work_guard(c.ioc);
  c.SendRequest();
  c.BackendAnswers("early ");
  c.WaitReadable();
  c.ioc.poll();  // the loop sees the event; no read is queued
  const bool skipped = SkipNextReadAttempt(c.proxy);
  c.StartRead();
  c.ioc.poll();
  if (!skipped) {
    ASSERT_TRUE(c.result.has_value()) << "without the skip the read tries recv and finds the bytes";
    EXPECT_EQ(c.got, "early ");
    GTEST_SKIP() << "this build cannot skip the read attempt";
  }
  EXPECT_FALSE(c.result.has_value()) << "the read tried recv after the skip";
  c.BackendAnswers("late");
  c.ExpectRead("early late", "new bytes came");
}

TEST(ReadAttempt, ABackendThatClosedWhileIdleResetsTheReadInsteadOfHangingIt) {
  // The one event an idle keep-alive connection can have had: the backend
  // closed it, and the loop saw that before the connection was reused. The
  // request then meets a closed socket, whose reset is a new event.
  Connection c;
  auto guard = asio::make_work_guard(c.ioc);
  c.backend.close();
  c.WaitReadable();
  c.ioc.poll();  // the close's event, seen with no read queued
  c.SendRequest();
  SkipNextReadAttempt(c.proxy);
  c.StartRead();
  c.ioc.run_one_for(kGuard);
  ASSERT_TRUE(c.result.has_value()) << "a request to a closed backend left the read hanging";
  EXPECT_TRUE(*c.result) << "a read from a closed backend reported success";
}

TEST(ReadAttempt, EveryReadinessEventSetsTheFlagAgain) {
  Connection c;
  auto guard = asio::make_work_guard(c.ioc);
  EXPECT_TRUE(NextReadAttempts(c.proxy)) << "a new socket tries its first read at once";
  if (!SkipNextReadAttempt(c.proxy)) GTEST_SKIP() << "this build cannot skip the read attempt";
  EXPECT_FALSE(NextReadAttempts(c.proxy));
  c.SendRequest();
  c.BackendAnswers("bytes");
  c.WaitReadable();
  c.ioc.poll();  // the event, with no read queued
  EXPECT_TRUE(NextReadAttempts(c.proxy)) << "an event the loop saw left the flag clear";
}

TEST(ReadAttempt, ReadIsQueuedTellsAQueuedReadFromOneThatCompletedAtOnce) {
  Connection c;
  auto guard = asio::make_work_guard(c.ioc);
  if (!CanSkipReadAttempt()) GTEST_SKIP() << "this build cannot tell";
  c.SendRequest();
  c.BackendAnswers("there");
  c.WaitReadable();
  c.StartRead();  // tried at once: the bytes are there
  EXPECT_FALSE(ReadIsQueued(c.proxy));
  c.ExpectRead("there", "the bytes were there");
  c.result.reset();
  c.StartRead();  // tried at once, found nothing: queued
  EXPECT_TRUE(ReadIsQueued(c.proxy));
  c.BackendAnswers("later");
  c.ExpectRead("later", "new bytes came");
  EXPECT_FALSE(ReadIsQueued(c.proxy));
}

// The client's side (HttpSession::DoWaitForRequest): a queued read whose
// recv came back short clears the flag in its handler. The next wait then
// makes no recv until an event comes, and bytes a pipelining client sends
// while the session is busy elsewhere raise one that sets the flag again.
struct ClientWait {
  explicit ClientWait(Connection& c) : c(c) {}
  void Start() {
    c.result.reset();
    c.proxy.async_read_some(asio::buffer(c.buffer), [this](error_code ec, size_t n) {
      c.result = ec;
      c.got.assign(c.buffer.data(), n);
      if (!ec && queued && n < c.buffer.size()) SkipNextReadAttempt(c.proxy);
    });
    queued = ReadIsQueued(c.proxy);
  }
  // The session's first wait on a kept-alive connection: it pays its empty
  // recv, is queued, and the short read of "request 1" clears the flag.
  void FirstRequest() {
    c.SendRequest();  // the backend's end reads it first (BackendAnswers)
    Start();
    ASSERT_TRUE(queued) << "the first wait found bytes it should not have";
    c.BackendAnswers("request 1");
    c.ExpectRead("request 1", "the request came");
    EXPECT_FALSE(NextReadAttempts(c.proxy)) << "the short queued read did not clear the flag";
  }
  Connection& c;
  bool queued = false;
};

TEST(ReadAttempt, AShortQueuedReadDrainedTheSocketSoTheNextWaitMakesNoRecv) {
  Connection c;
  auto guard = asio::make_work_guard(c.ioc);
  if (!CanSkipReadAttempt()) GTEST_SKIP() << "this build cannot skip the read attempt";
  ClientWait wait(c);
  ASSERT_NO_FATAL_FAILURE(wait.FirstRequest());
  wait.Start();  // no recv at once: the flag is clear
  ASSERT_TRUE(wait.queued);
  c.ioc.poll();
  EXPECT_FALSE(c.result.has_value());
  c.BackendAnswers("request 2");
  c.ExpectRead("request 2", "the next request came");
}

TEST(ReadAttempt, BytesPipelinedAfterTheClearAreReadByTheNextWait) {
  Connection c;
  auto guard = asio::make_work_guard(c.ioc);
  if (!CanSkipReadAttempt()) GTEST_SKIP() << "this build cannot skip the read attempt";
  ClientWait wait(c);
  ASSERT_NO_FATAL_FAILURE(wait.FirstRequest());
  // While the session waits on the backend, the client pipelines its next
  // request, and the loop sees its event with no read queued.
  c.BackendAnswers("request 2");
  c.WaitReadable();
  c.ioc.poll();
  wait.Start();  // after the response: tried at once, and the bytes are there
  EXPECT_FALSE(wait.queued);
  c.ExpectRead("request 2", "the pipelined request was in the socket");
}

TEST(ReadAttempt, AReadThatCompletedAtOnceLeavesTheFlagAlone) {
  // Its handler is posted: the loop may have seen events since its recv.
  Connection c;
  auto guard = asio::make_work_guard(c.ioc);
  if (!CanSkipReadAttempt()) GTEST_SKIP() << "this build cannot skip the read attempt";
  c.SendRequest();
  c.BackendAnswers("request 1");
  c.WaitReadable();
  ClientWait wait(c);
  wait.Start();
  EXPECT_FALSE(wait.queued);
  c.ExpectRead("request 1", "the bytes were there");
  EXPECT_TRUE(NextReadAttempts(c.proxy));
}

TEST(ReadAttempt, AClosedSocketIsLeftAlone) {
  asio::io_context ioc;
  Socket s(ioc.get_executor());
  EXPECT_FALSE(SkipNextReadAttempt(s));
}

}  // namespace
}  // namespace fencegate::proxy
