// The syscalls behind the two ways Asio 1.81 (epoll, edge-triggered) can
// start a read on a socket that has nothing to read yet, as the proxy's
// read of an upstream response right after the request went out:
//
// - a speculative read (async_read_some and everything built on it): one
//   recvmsg that returns EAGAIN, then the op waits in the reactor;
// - a readiness wait (socket::async_wait): no read, but the reactor
//   re-arms the socket with epoll_ctl(EPOLL_CTL_MOD) so that bytes that came
//   while nothing was pending still wake it (epoll_reactor::start_op, the
//   non-speculative branch). When the socket's registration includes
//   EPOLLOUT (it ever waited to write, e.g. its connect), the re-arm finds
//   it writable and the next epoll_wait returns at once with that event.
//
//   build-dir/bench/micro/readiness_bench
//
// Raw syscalls on a real loopback pair, so that the figures are the
// kernel's and nothing of Asio's bookkeeping.

#include <benchmark/benchmark.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <cstdint>
#include <stdexcept>

namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

// Asio's registration of a socket: EPOLLOUT is added once the socket has
// waited to write.
constexpr uint32_t kAsioEvents = EPOLLIN | EPOLLPRI | EPOLLERR | EPOLLHUP | EPOLLET;

// A connected loopback pair; `reader` is non-blocking, empty, and
// registered with its own epoll instance as Asio registers it.
struct Pair {
  explicit Pair(uint32_t events) : writer(ioc), reader(ioc), epoll_fd(epoll_create1(EPOLL_CLOEXEC)) {
    tcp::acceptor acceptor(ioc, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
    writer.connect(acceptor.local_endpoint());
    acceptor.accept(reader);
    reader.non_blocking(true);
    if (epoll_fd < 0) throw std::runtime_error("epoll_create1 failed");
    event.events = events;
    event.data.u64 = 1;
    if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, reader.native_handle(), &event) != 0) {
      throw std::runtime_error("epoll_ctl(ADD) failed");
    }
    Poll();  // drain the readiness the registration reported
  }
  ~Pair() { close(epoll_fd); }
  Pair(const Pair&) = delete;
  Pair& operator=(const Pair&) = delete;

  int Poll() {
    std::array<epoll_event, 4> out{};
    return epoll_wait(epoll_fd, out.data(), static_cast<int>(out.size()), 0);
  }

  asio::io_context ioc;
  tcp::socket writer;
  tcp::socket reader;
  int epoll_fd;
  epoll_event event{};
};

// The speculative read that finds nothing.
void BM_ReadThatFindsNothing(benchmark::State& state) {
  Pair p(kAsioEvents);
  std::array<char, 512> buf{};
  for (auto _ : state) {
    iovec iov{buf.data(), buf.size()};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    ssize_t n = recvmsg(p.reader.native_handle(), &msg, 0);
    if (n != -1) state.SkipWithError("the socket was not empty");
    benchmark::DoNotOptimize(n);
  }
}
BENCHMARK(BM_ReadThatFindsNothing);

// The re-arm a readiness wait starts with, on a socket registered for
// reading only.
void BM_RearmForWait(benchmark::State& state) {
  Pair p(kAsioEvents);
  for (auto _ : state) {
    int rc = epoll_ctl(p.epoll_fd, EPOLL_CTL_MOD, p.reader.native_handle(), &p.event);
    benchmark::DoNotOptimize(rc);
  }
}
BENCHMARK(BM_RearmForWait);

// The same on a socket whose registration includes EPOLLOUT: the re-arm
// reports it writable, so the event loop's next epoll_wait returns that
// event at once (counted here: the re-arm plus that poll).
void BM_RearmWritableForWait(benchmark::State& state) {
  Pair p(kAsioEvents | EPOLLOUT);
  int64_t woken = 0;
  for (auto _ : state) {
    int rc = epoll_ctl(p.epoll_fd, EPOLL_CTL_MOD, p.reader.native_handle(), &p.event);
    benchmark::DoNotOptimize(rc);
    woken += p.Poll();
  }
  state.counters["events_per_wait"] =
      benchmark::Counter(static_cast<double>(woken), benchmark::Counter::kAvgIterations);
}
BENCHMARK(BM_RearmWritableForWait);

// For scale: an epoll_wait that finds nothing ready.
void BM_PollNothing(benchmark::State& state) {
  Pair p(kAsioEvents);
  for (auto _ : state) benchmark::DoNotOptimize(p.Poll());
}
BENCHMARK(BM_PollNothing);

}  // namespace

BENCHMARK_MAIN();
