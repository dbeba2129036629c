#pragma once
// SkipNextReadAttempt: the next read on a plain TCP socket waits for epoll
// without first trying recv.
//
// Asio's epoll reactor tries every read at once (a "speculative" recv)
// before it queues the read for the socket's next readiness event. After
// fencegate writes a request upstream, that recv almost always finds
// nothing: the response cannot be there yet. That costs one empty recvmsg
// per proxied request, about 1 us of the 26-36 us of CPU a request takes on
// the development machine, and it is the larger part of what fencegate
// would spend per GET beyond nginx (docs/performance.md). nginx makes
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
//
// The client's side meets it another way, nginx's: a read that came back
// short found the socket drained at that instant. Clearing the flag is
// then safe if no event was seen between that recv and the clear, and that
// holds for a read that was queued for the socket's next event (ReadIsQueued
// just after it started) while nothing else was queued on the socket: the
// reactor's readiness handling makes its recv and calls its handler in one
// go, with no event loop turn in between (the first operation a readiness
// event completes is run at once, only the others are posted). A read that
// completed at once instead reaches its handler through a posted
// completion, and the loop may deliver events before it runs: no clear
// after those. So the session's wait for the next request on a kept-alive
// connection costs no empty recv once it is in that rhythm (the first wait
// pays one), and a client that pipelines (bytes that raise an event while
// the session waits on the backend) sets the flag again.

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
