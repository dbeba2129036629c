#pragma once
// Shared by the fuzz targets that read requests as a small-message session
// does (the admin and lock listeners): a fresh request_parser<string_body>
// with the session's limits fed from the input until one whole message.

#include <boost/asio/buffer.hpp>
#include <boost/beast/http.hpp>
#include <cstdint>
#include <string_view>

namespace fencegate::fuzz {

// Reads the next request of `input` from *offset into `parser` (whose limits
// the caller has set), advancing *offset. Returns the parser's error:
// need_more when the input ends inside the message.
inline boost::beast::error_code ReadWholeRequest(
    boost::beast::http::request_parser<boost::beast::http::string_body>& parser,
    std::string_view input, size_t* offset) {
  parser.eager(true);
  boost::beast::error_code ec;
  while (!parser.is_done()) {
    size_t used =
        parser.put(boost::asio::buffer(input.data() + *offset, input.size() - *offset), ec);
    *offset += used;
    if (ec || used == 0) break;
  }
  return ec;
}

}  // namespace fencegate::fuzz
