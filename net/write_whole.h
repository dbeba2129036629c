#pragma once
// WriteWhole: sends a message whose bytes are all in hand (a head from
// AppendHead and a whole body, as two buffers) on a stream. On a socket in
// non-blocking mode (plain TCP: HttpSession::Run, UpstreamPool::Connect) the
// bytes are first written at once; whatever the socket does not take now
// goes through async_write, bounded by `deadline` (armed for `timeout`
// while that write is pending: deadline.h). A TLS stream (whose
// socket stays blocking: its bytes must pass through OpenSSL) writes it all
// asynchronously. done(ec, at_once) runs exactly once: before WriteWhole
// returns when the socket took everything (or failed at once), with
// at_once true, else when the asynchronous write ends, with at_once false
// (the event loop has turned in between). The buffers must outlive that.
//
// A header of its own so that the partial-write path, which loopback rarely
// takes, can be tested on a socket with a small send buffer
// (tests/net/write_whole_test.cc).

#include <array>
#include <boost/asio/buffer.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/buffer_traits.hpp>
#include <boost/beast/core/buffers_suffix.hpp>
#include <boost/system/error_code.hpp>
#include <cstddef>
#include <utility>

#include "net/deadline.h"

namespace fencegate::proxy {

using WholeMessage = std::array<boost::asio::const_buffer, 2>;

template <class Stream, class Done>
void WriteWhole(Stream& stream, WholeMessage pieces, Deadline& deadline,
                Deadline::Clock::duration timeout, Done done) {
  boost::beast::buffers_suffix<WholeMessage> rest(pieces);
  if (stream.socket().non_blocking()) {
    boost::system::error_code ec;
    size_t n = stream.socket().write_some(rest, ec);
    if (ec && (ec == boost::asio::error::would_block || ec == boost::asio::error::try_again)) {
      n = 0;
    } else if (ec || n == boost::beast::buffer_bytes(rest)) {
      return done(ec, true);
    }
    rest.consume(n);
  }
  boost::asio::async_write(
      stream, rest,
      Timed(deadline, timeout,
            [done = std::move(done)](boost::system::error_code ec, size_t) mutable {
              done(ec, false);
            }));
}

}  // namespace fencegate::proxy
