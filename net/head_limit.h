#pragma once
// PutHead: feeds a Beast parser the bytes of a message head, with
// limits.max_header_bytes bounding the whole head (start line, every field
// and the blank line that ends it), however the reads split it: the head
// bytes consumed are counted across puts, which Beast's own header_limit
// does not do (docs/architecture.md, "The whole head's limit"). What is held
// is then a small multiple of the bound at most.

#include <algorithm>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/error.hpp>
#include <cstdint>
#include <limits>

namespace fencegate::proxy {

// Puts what `buffer` holds into `parser` (whose head is not complete),
// consuming what it parsed; `*consumed` counts the head bytes consumed so
// far (0 before the first call for a message). Returns true when the head
// is complete, or failed (`ec`; http::error::header_limit when it is
// longer than `max_bytes`); false when it needs more bytes.
template <class Parser, class DynamicBuffer>
bool PutHead(Parser& parser, DynamicBuffer& buffer, uint64_t max_bytes, uint64_t* consumed,
             boost::beast::error_code& ec) {
  namespace http = boost::beast::http;
  parser.header_limit(
      static_cast<uint32_t>(std::min<uint64_t>(max_bytes, std::numeric_limits<uint32_t>::max())));
  while (!parser.is_header_done()) {
    if (buffer.size() == 0) return false;
    const size_t used = parser.put(buffer.data(), ec);
    buffer.consume(used);
    *consumed += used;
    if (ec && ec != http::error::need_more) return true;
    if (*consumed > max_bytes) {
      ec = http::error::header_limit;
      return true;
    }
    if (ec) {  // need_more
      ec = {};
      return false;
    }
    if (used == 0) return false;  // no progress: more bytes are needed
  }
  return true;
}

}  // namespace fencegate::proxy
