#pragma once
// Header hygiene between client and upstream: which fields are end-to-end
// and may be copied, and which belong to one connection only (RFC 9110
// section 7.6.1) and are dropped. Framing (Content-Length,
// Transfer-Encoding) is never copied: fencegate re-frames every message.

#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/fields.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <string>
#include <string_view>

#include "config/config.h"
#include "fence/canonical_path.h"

namespace fencegate::proxy {

// Copies every end-to-end field of `from` into `to`, skipping hop-by-hop
// fields, the fields that the Connection header names, framing fields, and
// `Expect` (fencegate answers 100-continue itself). `skip` names one more
// field to drop (e.g. the token header when it is not forwarded); empty = none.
void CopyEndToEndFields(const boost::beast::http::fields& from, boost::beast::http::fields& to,
                        std::string_view skip = {});

// Fields fencegate sets itself on the upstream request, so CopyEndToEndFields
// leaves them out: X-Forwarded-For, X-Forwarded-Proto, Forwarded, X-Request-Id.
bool IsForwardingField(std::string_view name);

// Sets X-Forwarded-For, X-Forwarded-Proto and Forwarded on `out` for a
// request from `client_ip` (already a textual address). With trusted_hops 0
// whatever the client sent in those headers is dropped (it could be forged);
// with N > 0 the last N X-Forwarded-For entries and the incoming
// X-Forwarded-Proto/Forwarded (set by the trusted proxies) are kept and the
// peer is appended. `proto` is how the client reached fencegate ("https" on
// a TLS listener), used unless a trusted proxy said otherwise.
void SetForwardingFields(const boost::beast::http::fields& in, boost::beast::http::fields& out,
                         std::string_view client_ip, unsigned trusted_hops,
                         std::string_view proto = "http");

// A request id a client may choose: 1..128 of [A-Za-z0-9._:-]. Anything else
// is replaced by a generated one.
bool IsValidRequestId(std::string_view id);
// Sets *id to 32 lowercase hex digits from a per-thread random generator
// (in the string's own buffer: a session's id is rewritten, not reallocated,
// request after request).
void NewRequestId(std::string* id);

// True when the request carries "Expect: 100-continue".
bool ExpectsContinue(const boost::beast::http::fields& fields);

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

// True for the statuses that never have a body: 1xx, 204 and 304.
bool BodilessStatus(unsigned status);

// How the response to the client is delimited.
struct DownstreamFraming {
  bool keep_alive = false;       // the client connection stays open afterwards
  bool close_delimited = false;  // the upstream body ends at EOF (no length, not chunked)
  bool chunked = false;          // the client gets Transfer-Encoding: chunked
};

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

// The framing BuildDownstreamResponse returns for the same arguments,
// without building a head: the session decides with it whether the
// response is relayed whole (AppendDownstreamHead) or through the
// serializer (BuildDownstreamResponse).
DownstreamFraming DecideDownstreamFraming(
    const boost::beast::http::response_parser<boost::beast::http::buffer_body>& parser,
    bool head_request, bool client_http11, bool keep_alive);

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
// (headers.cc), so the fields, their order and the framing are decided
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
