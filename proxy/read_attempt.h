#pragma once
// SkipNextReadAttempt: the next read on a plain TCP socket waits for epoll
// without first trying recv.
//
// Asio's epoll reactor tries every read at once (a "speculative" recv)
// before it queues the read for the socket's next readiness event. After
// fencegate writes a request upstream, that recv almost always finds
// nothing: the response cannot be there yet. It cost one empty recvmsg per
// proxied request, about 1 us of the 26-36 us of CPU a request takes on the
// development machine, and it was the larger part of what fencegate spends
// per GET beyond nginx (bench/PERFORMANCE.md, sessions 22-24). nginx makes
// no such call: after its read found the socket drained it waits for the
// next event (its `ready` flag).
//
// Asio keeps the same knowledge per socket and direction, a flag set by
// every readiness event and cleared when a read meets end of stream. No
// public API clears it, so this reaches it in Boost 1.81's epoll reactor
// (read_attempt.cc says how). Any other Boost version or reactor compiles
// to a no-op that returns false: the read then costs its recv, and nothing
// else changes.
//
// Precondition, for the caller: nothing readable has arrived on the socket
// that the io_context has already seen. A readiness event the reactor
// delivered before the flag is cleared, with no read queued, would be
// forgotten, and the next read would wait for the next event (for bytes
// that are already there). Bytes that arrive after the clear, or before it
// but with no event loop turn in between, raise a new event and complete
// the read. So: call it on the socket's own thread, in the same handler
// that wrote a request on a connection that had nothing to say before (an
// idle keep-alive upstream connection sends nothing but a close; a close
// answered by our request is a reset, which is an event too).

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

}  // namespace fencegate::proxy
