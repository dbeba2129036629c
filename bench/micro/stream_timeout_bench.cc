// What a timeout costs one read on a real loopback socket, on one thread:
// a Beast tcp_stream timer per operation (Beast's own timeout), a
// Deadline (net/deadline.h: two clock reads, no timer), and no timeout.
// Each iteration starts the read first (so it waits in the reactor, as a
// proxied request's reads do), then writes one byte from the peer and runs
// the io_context until the read's handler has run.
//
//   build-dir/bench/micro/stream_timeout_bench
//
// The Beast variant also pays, inside the measured loop, for its timer's
// cancelled wait: one more handler and one more epoll_wait per read.

#include <benchmark/benchmark.h>

#include <array>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <chrono>

#include "net/deadline.h"

namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using fencegate::proxy::Deadline;
using fencegate::proxy::Timed;

enum class Timeout { kBeastTimer, kDeadline, kNone };

void BM_ReadOneByte(benchmark::State& state, Timeout timeout) {
  asio::io_context ioc(1);
  auto work = asio::make_work_guard(ioc);  // run_one() never finds it out of work
  boost::beast::basic_stream<tcp, asio::io_context::executor_type> reader(ioc.get_executor());
  tcp::socket writer(ioc);
  {
    tcp::acceptor acceptor(ioc, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
    writer.connect(acceptor.local_endpoint());
    acceptor.accept(reader.socket());
  }
  writer.set_option(tcp::no_delay(true));
  Deadline deadline;
  std::array<char, 64> buf{};
  const char byte = 'x';
  constexpr auto kTimeout = std::chrono::seconds(30);
  for (auto _ : state) {
    bool done = false;
    auto handler = [&done](boost::system::error_code ec, size_t) {
      if (ec) throw boost::system::system_error(ec);
      done = true;
    };
    switch (timeout) {
      case Timeout::kBeastTimer:
        reader.expires_after(kTimeout);
        reader.async_read_some(asio::buffer(buf), handler);
        break;
      case Timeout::kDeadline:
        reader.async_read_some(asio::buffer(buf), Timed(deadline, kTimeout, handler));
        break;
      case Timeout::kNone:
        reader.async_read_some(asio::buffer(buf), handler);
        break;
    }
    writer.write_some(asio::buffer(&byte, 1));
    while (!done) ioc.run_one();
  }
}

BENCHMARK_CAPTURE(BM_ReadOneByte, beast_timer, Timeout::kBeastTimer);
BENCHMARK_CAPTURE(BM_ReadOneByte, deadline, Timeout::kDeadline);
BENCHMARK_CAPTURE(BM_ReadOneByte, none, Timeout::kNone);

}  // namespace

BENCHMARK_MAIN();
