#pragma once
// The heads fencegate writes: the request it sends upstream and the
// response head it sends the client, each two ways. Build* fill a Beast
// message for Beast's serializer (bodies that stream or are chunked);
// Append* write the same bytes straight into a buffer, for a head sent
// whole with its body in one write. One routine per head decides its
// fields, their order and its framing for both (head_writer.cc, through
// head_sinks.h), so the two ways cannot disagree.

#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/fields.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <string>
#include <string_view>

#include "config/config.h"
#include "fence/canonical_path.h"
#include "proxy/framing.h"

namespace fencegate::proxy {

// The head fencegate sends upstream for the request `parser` has read: its
// method, `target` (canonical path and raw query) under the upstream base
// path, HTTP/1.1, the end-to-end fields (the token header only with
// fencing.forward_token), the forwarding fields, X-Request-Id, a Host when
// the client sent none, and fencegate's own framing: Content-Length when the
// client's body had one, else chunked when it was chunked. With a
// `destination` (a COPY or MOVE, fence_filter.h), the Destination field is
// replaced by its canonical spelling under the upstream base path, so the
// backend writes exactly the resource that was fenced. Replaces *out; its
// body is left empty for the caller to stream.
using UpstreamRequest = boost::beast::http::request<boost::beast::http::buffer_body>;
void BuildUpstreamRequest(
    const boost::beast::http::request_parser<boost::beast::http::buffer_body>& parser,
    const CanonicalTarget& target, const config::Config& config, std::string_view client_ip,
    std::string_view request_id, UpstreamRequest* out,
    const CanonicalDestination* destination = nullptr);

// The head fencegate sends the client for the final upstream response that
// `parser` has read the head of: the same status and reason, HTTP/1.1 for
// HTTP/1.1 clients else HTTP/1.0, the end-to-end fields, and fencegate's own
// framing: the upstream Content-Length (copied as is for a HEAD request or a
// bodiless status), else chunked for HTTP/1.1 clients, else delimited by
// closing the connection. `keep_alive` is what the session would like;
// the result says what the framing allows. Replaces *out; its body is left
// for the caller to stream.
using DownstreamResponse = boost::beast::http::response<boost::beast::http::buffer_body>;
DownstreamFraming BuildDownstreamResponse(
    const boost::beast::http::response_parser<boost::beast::http::buffer_body>& parser,
    bool head_request, bool client_http11, bool keep_alive, DownstreamResponse* out);

// Appends the head of `h` to *out in one piece, byte for byte as Beast's
// serializer writes it: the start line, the fields in order, the blank
// line. The session sends a head built here together with a body it holds
// whole in one write, instead of through Beast's serializer, whose buffer
// views (a start line in three pieces, then one per field) cost 7% of
// fencegate's CPU per request at 64 connections (docs/performance.md).
// Bodies that stream or are chunked still go through the serializer.
void AppendHead(const UpstreamRequest::header_type& h, std::string* out);
void AppendHead(const DownstreamResponse::header_type& h, std::string* out);

// The two heads the session sends whole, appended to *out straight from the
// parsed message, without the intermediate Beast message (whose fields are
// one heap node each): the bytes are exactly those of AppendHead over what
// BuildUpstreamRequest builds for the same arguments, and of AppendHead over
// what BuildDownstreamResponse builds followed by set("X-Request-Id",
// request_id). Both builders and these walk the head in one routine
// (head_writer.cc), so the fields, their order and the framing are decided
// once; what differs is only where they go. AppendDownstreamHead returns
// the framing, as BuildDownstreamResponse does.
void AppendUpstreamHead(
    const boost::beast::http::request_parser<boost::beast::http::buffer_body>& parser,
    const CanonicalTarget& target, const config::Config& config, std::string_view client_ip,
    std::string_view request_id, std::string* out,
    const CanonicalDestination* destination = nullptr);
DownstreamFraming AppendDownstreamHead(
    const boost::beast::http::response_parser<boost::beast::http::buffer_body>& parser,
    bool head_request, bool client_http11, bool keep_alive, std::string_view request_id,
    std::string* out);

}  // namespace fencegate::proxy
