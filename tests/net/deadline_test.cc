// Deadline, Timed and DeadlineSweep: the coarse timeouts of the data plane
// (net/deadline.h), on a real loopback connection and io_context.

#include "net/deadline.h"

#include <gtest/gtest.h>

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <optional>

namespace fencegate::proxy {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = Deadline::Clock;
using std::chrono::milliseconds;

struct SocketPair {
  SocketPair() : a(ioc), b(ioc) {
    tcp::acceptor acceptor(ioc, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
    a.connect(acceptor.local_endpoint());
    acceptor.accept(b);
  }
  asio::io_context ioc;
  tcp::socket a;
  tcp::socket b;
};

TEST(Deadline, ExpiresOnceWhenDueAndNotBefore) {
  Deadline d;
  EXPECT_FALSE(d.armed());
  EXPECT_FALSE(d.Expire(Clock::now() + std::chrono::hours(24 * 365)));  // never armed
  d.Arm(milliseconds(100));
  EXPECT_TRUE(d.armed());
  const auto now = Clock::now();
  EXPECT_FALSE(d.Expire(now));
  EXPECT_TRUE(d.Expire(now + milliseconds(101)));
  EXPECT_FALSE(d.armed());
  EXPECT_FALSE(d.Expire(now + milliseconds(200))) << "expired twice";
  d.Arm(milliseconds(0));
  d.Disarm();
  EXPECT_FALSE(d.Expire(Clock::now() + milliseconds(1)));
}

TEST(Deadline, TimedArmsAndItsHandlerDisarmsBeforeItRuns) {
  Deadline d;
  std::optional<bool> armed_inside;
  int value = 0;
  auto handler = Timed(d, milliseconds(500), [&](int v) {
    armed_inside = d.armed();
    value = v;
  });
  EXPECT_TRUE(d.armed());
  handler(7);
  ASSERT_TRUE(armed_inside.has_value());
  EXPECT_FALSE(*armed_inside) << "the handler ran with its deadline still armed";
  EXPECT_EQ(value, 7);
}

TEST(Deadline, SweepIntervalIsATenthOfTheShortestTimeoutWithinBounds) {
  // The defaults (10 s, 60 s, 30 s): the cap.
  EXPECT_EQ(SweepInterval({milliseconds(10000), milliseconds(60000), milliseconds(30000)}),
            milliseconds(250));
  EXPECT_EQ(SweepInterval({milliseconds(1000), milliseconds(60000)}), milliseconds(100));
  EXPECT_EQ(SweepInterval({milliseconds(300)}), milliseconds(30));
  EXPECT_EQ(SweepInterval({milliseconds(5)}), milliseconds(1));
}

// The sweep closes a socket whose pending read is past its deadline: the
// read ends with an error, not before the deadline.
TEST(DeadlineSweep, ClosesAStreamWhoseOperationIsPastItsDeadline) {
  SocketPair p;
  Deadline d;
  std::array<char, 16> buf{};
  std::optional<boost::system::error_code> result;
  const auto started = Clock::now();
  Clock::time_point ended;
  p.b.async_read_some(asio::buffer(buf),
                      Timed(d, milliseconds(50), [&](boost::system::error_code ec, size_t) {
                        result = ec;
                        ended = Clock::now();
                      }));
  DeadlineSweep sweep(p.ioc, milliseconds(5), [&](Clock::time_point now) {
    if (d.Expire(now)) p.b.close();
    return !result.has_value();
  });
  sweep.Ensure();
  p.ioc.run_for(std::chrono::seconds(10));
  ASSERT_TRUE(result.has_value()) << "the read never ended: the sweep did not close it";
  EXPECT_EQ(*result, asio::error::operation_aborted) << result->message();
  EXPECT_GE(ended - started, milliseconds(50)) << "closed before its deadline";
  EXPECT_FALSE(sweep.running()) << "the sweep kept ticking with nothing to watch";
}

// An operation that ends in time disarms its deadline: later sweeps leave
// the stream open; and the sweep stops once told nothing is left, so run()
// returns by itself.
TEST(DeadlineSweep, LeavesAStreamWhoseOperationEndedInTime) {
  SocketPair p;
  Deadline d;
  std::array<char, 16> buf{};
  std::optional<boost::system::error_code> result;
  p.b.async_read_some(asio::buffer(buf), Timed(d, milliseconds(20),
                                               [&](boost::system::error_code ec, size_t) {
                                                 result = ec;
                                               }));
  asio::write(p.a, asio::buffer("x", 1));
  int ticks_after = 0;
  DeadlineSweep sweep(p.ioc, milliseconds(10), [&](Clock::time_point now) {
    if (d.Expire(now)) p.b.close();
    if (result.has_value()) ++ticks_after;
    return ticks_after < 5;  // well past the 20 ms deadline
  });
  sweep.Ensure();
  p.ioc.run_for(std::chrono::seconds(10));
  ASSERT_TRUE(result.has_value());
  EXPECT_FALSE(*result) << result->message();
  EXPECT_EQ(ticks_after, 5) << "run() returned before the sweep stopped, or the sweep went on";
  EXPECT_TRUE(p.b.is_open()) << "the sweep closed a stream whose read had ended";
  EXPECT_FALSE(sweep.running());
  // Ensure() starts it again once something may arm a deadline.
  sweep.Ensure();
  EXPECT_TRUE(sweep.running());
  sweep.Stop();
  p.ioc.restart();
  p.ioc.run_for(std::chrono::seconds(10));
  EXPECT_EQ(ticks_after, 5) << "a stopped sweep still ticked";
  sweep.Ensure();
  EXPECT_FALSE(sweep.running()) << "a stopped sweep started again";
}

}  // namespace
}  // namespace fencegate::proxy
