#pragma once
// Coarse timeouts for the data plane's streams, instead of Beast's timer per
// operation (docs/architecture.md, "Coarse timeouts", says why).
//
// A stream's timeout is a Deadline, a time point set when an operation
// starts and cleared when its handler runs (Timed). One DeadlineSweep per
// worker wakes every interval and lets the sessions close the streams whose
// deadline has passed. A timeout then fires between its duration and its
// duration plus one interval (SweepInterval: a tenth of the shortest
// configured timeout, at most 250 ms).
//
// Single-threaded: a Deadline, the sweep and the streams belong to one
// worker's io_context.

#include <boost/asio/error.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/error.hpp>
#include <chrono>
#include <functional>
#include <initializer_list>
#include <utility>

namespace fencegate::proxy {

// A timeout, whoever noticed it: Beast's own timers or the socket's.
inline bool IsTimeout(const boost::system::error_code& ec) {
  return ec && (ec == boost::beast::error::timeout || ec == boost::asio::error::timed_out);
}

class Deadline {
 public:
  using Clock = std::chrono::steady_clock;

  void Arm(Clock::duration timeout) { at_ = Clock::now() + timeout; }
  void Disarm() { at_ = Clock::time_point::max(); }
  bool armed() const { return at_ != Clock::time_point::max(); }
  // True, once, when armed and `now` has reached the deadline (it disarms).
  bool Expire(Clock::time_point now) {
    if (now < at_) return false;
    Disarm();
    return true;
  }

 private:
  Clock::time_point at_ = Clock::time_point::max();
};

// Arms `deadline` for `timeout` and returns `handler` wrapped so that it
// disarms the deadline before it runs: pass the result as the completion
// handler of the operation the timeout bounds. `deadline` must outlive the
// handler (it is a member of the session the handler keeps alive).
template <class Handler>
auto Timed(Deadline& deadline, Deadline::Clock::duration timeout, Handler handler) {
  deadline.Arm(timeout);
  return [d = &deadline, h = std::move(handler)](auto&&... args) mutable {
    d->Disarm();
    h(std::forward<decltype(args)>(args)...);
  };
}

// The sweep period for a set of timeouts: a tenth of the shortest, within
// [1 ms, 250 ms].
std::chrono::milliseconds SweepInterval(std::initializer_list<std::chrono::milliseconds> timeouts);

// Every interval, while it runs, calls `sweep(now)`; `sweep` closes what has
// expired and returns whether anything is left to watch (false: the sweep
// stops until Ensure() starts it again, so an idle worker does not wake).
class DeadlineSweep {
 public:
  using Sweep = std::function<bool(Deadline::Clock::time_point now)>;

  DeadlineSweep(boost::asio::io_context& ioc, std::chrono::milliseconds interval, Sweep sweep)
      : timer_(ioc), interval_(interval), sweep_(std::move(sweep)) {}

  // Starts the ticks unless they run: call when something may arm a deadline.
  void Ensure() {
    if (running_ || stopped_) return;
    running_ = true;
    Schedule();
  }
  // For good (shutdown): the io_context's run() need not wait for a tick.
  void Stop() {
    stopped_ = true;
    running_ = false;
    timer_.cancel();
  }
  bool running() const { return running_; }
  // From the next tick on (a reload changed the timeouts); on the
  // io_context's thread.
  void SetInterval(std::chrono::milliseconds interval) { interval_ = interval; }

 private:
  void Schedule() {
    timer_.expires_after(interval_);
    timer_.async_wait([this](const boost::system::error_code& ec) {
      if (ec || stopped_) return;
      if (sweep_(Deadline::Clock::now())) return Schedule();
      running_ = false;
    });
  }

  boost::asio::steady_timer timer_;
  std::chrono::milliseconds interval_;
  Sweep sweep_;
  bool running_ = false;
  bool stopped_ = false;
};

}  // namespace fencegate::proxy
