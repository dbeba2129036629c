#pragma once
// The relay's two shortcuts around the event loop (UpstreamExchange): a
// message part already in hand is parsed without an asynchronous read
// (ParseBuffered), and a write is tried on the non-blocking socket before it
// becomes an asynchronous one (TryWriteNow). Each saves an operation, its
// timer and a trip through the event loop for a small message, which is
// most of them.
//
// Single-threaded: used on the thread that owns the parser, buffer, socket
// and serializer.

#include <boost/asio/error.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/write.hpp>
#include <cstddef>

namespace fencegate::proxy {

// Feeds `parser` what `buffer` already holds, as http::async_read would
// before its first read, but without the asynchronous round trip: true when
// that was enough (`done(parser)`, or an error other than need_more, in
// `ec`); false when bytes must still be read (then async_read carries on
// from where this stopped).
template <class Parser, class Done>
bool ParseBuffered(Parser& parser, boost::beast::flat_buffer& buffer, Done done,
                   boost::beast::error_code& ec) {
  namespace http = boost::beast::http;
  while (!done(parser)) {
    if (buffer.size() == 0) return false;
    size_t used = parser.put(buffer.data(), ec);
    buffer.consume(used);
    if (ec && ec == http::error::need_more) {
      ec = {};
      return false;
    }
    if (ec) return true;
    if (used == 0) return false;  // no progress: let async_read decide
  }
  return true;
}

// ParseBuffered's `done` for a whole message.
inline constexpr auto kMessageDone = [](const auto& parser) { return parser.is_done(); };

// Writes what `sr` has ready on `socket` now, when the socket is in
// non-blocking mode (plain TCP: HttpSession::Run, UpstreamPool::Connect).
// True when that settled it: all written, need_buffer (the next piece is not
// read yet) or an error, in `ec`. False when the socket is blocking (TLS) or
// would not take it all: the rest goes through an asynchronous write.
template <class Socket, class Serializer>
bool TryWriteNow(Socket& socket, Serializer& sr, boost::beast::error_code& ec) {
  if (!socket.non_blocking()) return false;
  boost::beast::http::write(socket, sr, ec);
  if (ec && (ec == boost::asio::error::would_block || ec == boost::asio::error::try_again)) {
    ec = {};
    return false;  // the rest goes asynchronously
  }
  return true;
}

}  // namespace fencegate::proxy
