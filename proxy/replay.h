#pragma once
// An idempotent request's response as the store keeps it, and as a repeat
// gets it back (docs/contract.md, "Idempotency keys"): CaptureResponseHead
// keeps the status and the end-to-end fields the client was sent (those
// AppendDownstreamHead copies, without X-Request-Id, which belongs to each
// request); AppendReplayHead writes them again for a repeat, framed by the
// stored body's length and marked `Idempotent-Replayed: true`.

#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <string>
#include <string_view>

#include "storage/idempotency_record.h"

namespace fencegate::proxy {

// Status and fields of the final upstream response `parser` has read the
// head of; the body is left empty and kept.
void CaptureResponseHead(
    const boost::beast::http::response_parser<boost::beast::http::buffer_body>& parser,
    storage::StoredResponse* out);

// The head of a replay of `stored`: the status with its standard reason,
// HTTP/1.1 for HTTP/1.1 clients else HTTP/1.0, the stored fields in order,
// Content-Length of the stored body (none for 204 and 304, which have no
// body), Idempotent-Replayed: true, the connection's keep-alive, and the
// repeat's own X-Request-Id. Appended to *out.
void AppendReplayHead(const storage::StoredResponse& stored, bool client_http11, bool keep_alive,
                      std::string_view request_id, std::string* out);

// Whether a response with this status carries a body a replay repeats.
bool ReplayHasBody(unsigned status);

}  // namespace fencegate::proxy
