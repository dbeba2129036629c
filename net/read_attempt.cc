#include "net/read_attempt.h"

#include <boost/version.hpp>

// FENCEGATE_SKIP_READ_ATTEMPT (net/CMakeLists.txt) is on by default, and
// only for the reactor whose layout was read for this: Boost 1.81's
// epoll_reactor (the default on Linux; io_uring is opt-in and not used
// here). Check the members below against the new version's
// boost/asio/detail/epoll_reactor.hpp before widening this.
#ifdef FENCEGATE_SKIP_READ_ATTEMPT
#if BOOST_VERSION != 108100 || !defined(BOOST_ASIO_HAS_EPOLL) || \
    defined(BOOST_ASIO_HAS_IO_URING_AS_DEFAULT) || defined(BOOST_ASIO_DISABLE_EPOLL)
#error "the skipped read attempt needs Boost 1.81's epoll reactor: configure with -DFENCEGATE_SKIP_READ_ATTEMPT=OFF"
#endif
#include <boost/asio/detail/conditionally_enabled_mutex.hpp>
#include <boost/asio/detail/epoll_reactor.hpp>
#include <boost/asio/detail/reactor.hpp>
#include <type_traits>
#endif

namespace fencegate::proxy {

#ifdef FENCEGATE_SKIP_READ_ATTEMPT
namespace {

namespace detail = boost::asio::detail;
using Reactor = detail::epoll_reactor;
using State = Reactor::descriptor_state;
static_assert(std::is_same_v<detail::reactor, Reactor>, "sockets here are not on epoll_reactor");

// The socket's service state is a protected member of basic_socket: a
// pointer to it may be formed through a derived class.
struct SocketAccess : TcpSocketBase {
  static auto& Implementation(TcpSocketBase& socket) {
    return (socket.*&SocketAccess::impl_).get_implementation();
  }
};

// descriptor_state's flag and mutex are private. Access is not checked on
// the arguments of an explicit instantiation ([temp.spec]), so this one
// stores pointers to them in a friend function that code here can call.
template <class Tag, typename Tag::Type kMember>
struct Expose {
  friend typename Tag::Type Member(Tag) { return kMember; }
};
struct TrySpeculative {
  using Type = bool (State::*)[Reactor::max_ops];
  friend Type Member(TrySpeculative);
};
struct StateMutex {
  using Type = detail::conditionally_enabled_mutex State::*;
  friend Type Member(StateMutex);
};
struct OpQueues {
  using Type = detail::op_queue<detail::reactor_op> (State::*)[Reactor::max_ops];
  friend Type Member(OpQueues);
};
template struct Expose<TrySpeculative, &State::try_speculative_>;
template struct Expose<StateMutex, &State::mutex_>;
template struct Expose<OpQueues, &State::op_queue_>;

}  // namespace

bool CanSkipReadAttempt() { return true; }

bool SkipNextReadAttempt(TcpSocketBase& socket) {
  State* state = SocketAccess::Implementation(socket).reactor_data_;
  if (state == nullptr) return false;  // closed, or never opened
  // The reactor's own lock: readiness events set the flag under it.
  detail::conditionally_enabled_mutex::scoped_lock lock(state->*Member(StateMutex{}));
  (state->*Member(TrySpeculative{}))[Reactor::read_op] = false;
  return true;
}

bool NextReadAttempts(TcpSocketBase& socket) {
  State* state = SocketAccess::Implementation(socket).reactor_data_;
  if (state == nullptr) return true;
  detail::conditionally_enabled_mutex::scoped_lock lock(state->*Member(StateMutex{}));
  return (state->*Member(TrySpeculative{}))[Reactor::read_op];
}

bool ReadIsQueued(TcpSocketBase& socket) {
  State* state = SocketAccess::Implementation(socket).reactor_data_;
  if (state == nullptr) return false;
  detail::conditionally_enabled_mutex::scoped_lock lock(state->*Member(StateMutex{}));
  return !(state->*Member(OpQueues{}))[Reactor::read_op].empty();
}

#else

bool CanSkipReadAttempt() { return false; }

bool SkipNextReadAttempt(TcpSocketBase&) { return false; }

bool NextReadAttempts(TcpSocketBase&) { return true; }

bool ReadIsQueued(TcpSocketBase&) { return false; }

#endif

}  // namespace fencegate::proxy
