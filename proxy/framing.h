#pragma once
// How the response to the client is delimited: fencegate re-frames every
// message, and decides a response's framing in one place (PlanResponse)
// for every head it writes.

#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/fields.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/optional/optional.hpp>
#include <cstdint>

namespace fencegate::proxy {

// True for the statuses that never have a body: 1xx, 204 and 304.
bool BodilessStatus(unsigned status);

// How the response to the client is delimited.
struct DownstreamFraming {
  bool keep_alive = false;       // the client connection stays open afterwards
  bool close_delimited = false;  // the upstream body ends at EOF (no length, not chunked)
  bool chunked = false;          // the client gets Transfer-Encoding: chunked
};

// The framing BuildDownstreamResponse returns for the same arguments,
// without building a head: the session decides with it whether the
// response is relayed whole (AppendDownstreamHead) or through the
// serializer (BuildDownstreamResponse).
DownstreamFraming DecideDownstreamFraming(
    const boost::beast::http::response_parser<boost::beast::http::buffer_body>& parser,
    bool head_request, bool client_http11, bool keep_alive);

namespace detail {

// The response's framing and the length field it carries.
struct ResponsePlan {
  DownstreamFraming framing;
  // A HEAD request or a bodiless status: the upstream Content-Length as is.
  const boost::beast::http::fields::value_type* copied_length = nullptr;
  boost::optional<uint64_t> length;  // else the upstream's length, if it gave one
};

// The upstream Content-Length as is for a HEAD request or a bodiless
// status, else the upstream's length, else chunked for an HTTP/1.1 client
// and delimited by close for an HTTP/1.0 one (which then cannot keep the
// connection). `keep_alive` is what the session would like.
ResponsePlan PlanResponse(
    const boost::beast::http::response_parser<boost::beast::http::buffer_body>& parser,
    bool head_request, bool client_http11, bool keep_alive);

}  // namespace detail
}  // namespace fencegate::proxy
