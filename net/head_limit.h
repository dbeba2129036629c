#pragma once
// PutHead: feeds a Beast parser the bytes of a message head, with
// limits.max_header_bytes bounding the whole head (start line, every field
// and the blank line that ends it).
//
// Beast's header_limit bounds only the bytes of one put() that are not parsed
// yet: each put parses the complete fields it holds and consumes them. When a
// put leaves three bytes or more of a field, the next one first looks for the
// end of the head within the limit, and fails without it; but when a read
// ends one or two bytes into a field, the next put is bounded only by the
// limit applied to it alone. A head whose reads all end so (6,000 fields of
// 32 bytes, 192 KB, read 512 bytes at a time) would go through a limit of
// 16 KiB whole, and the parser would keep every field. So the head bytes
// consumed are counted across puts: a head is refused as soon as they pass
// the bound, and Beast's own limit still refuses an unfinished rest as long
// as the bound. What is held is then a small multiple of the bound at most.
//
// (Lowering header_limit before each put by what was consumed is not the
// same: Beast resumes its search for the head's end where the last put
// stopped, and with a limit below that point it asks for more bytes
// forever instead of failing.)

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
