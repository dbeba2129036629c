#pragma once
// SkipNextReadAttempt: the next read on a plain TCP socket waits for epoll
// without first trying recv (docs/architecture.md, "The skipped read
// attempt", says why and how). It reaches Asio's per-socket flag in Boost
// 1.81's epoll reactor (read_attempt.cc says how); the build refuses any
// other Boost or reactor unless configured with
// -DFENCEGATE_SKIP_READ_ATTEMPT=OFF, which compiles these to no-ops that
// change nothing (every read then costs its recv, nothing else).
//
// Precondition, for the caller: nothing readable has arrived on the socket
// that the io_context has already seen; a readiness event delivered before
// the clear, with no read queued, would be forgotten, and the next read
// would wait for the next event. It holds on the socket's own thread, in
// the same handler that wrote a request on a connection that had nothing to
// say before; and after a read that came back short, if that read was queued
// for the socket's next event (ReadIsQueued just after it started) while
// nothing else was queued on the socket.

#include <boost/asio/basic_socket.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

namespace fencegate::proxy {

using TcpSocketBase =
    boost::asio::basic_socket<boost::asio::ip::tcp, boost::asio::io_context::executor_type>;

// True when this build can skip the attempt (Boost 1.81 on epoll).
bool CanSkipReadAttempt();

// Clears the socket's "try a read first" flag for reads; true when it did.
// Returns false, changing nothing, when the build cannot or the socket is
// closed.
bool SkipNextReadAttempt(TcpSocketBase& socket);

// Whether the next read on this socket tries recv at once: the flag that
// SkipNextReadAttempt clears and every readiness event sets. True when the
// build cannot tell (every read is then tried at once) or the socket is
// closed.
bool NextReadAttempts(TcpSocketBase& socket);

// Whether a read is queued on this socket, waiting for its next readiness
// event (an asynchronous read that was not completed at once). False when
// the build cannot tell or the socket is closed.
bool ReadIsQueued(TcpSocketBase& socket);

}  // namespace fencegate::proxy
