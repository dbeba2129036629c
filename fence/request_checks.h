#pragma once
// Request framing checks (RFC 9112 sections 6 and 3.2). A request that
// fencegate and the backend could frame or route differently is a fencing
// bypass (request smuggling), so every ambiguous head is refused with 400 and
// nothing is forwarded. Boost.Beast's parser already refuses some of these;
// the rest, and anything it lets through, are caught here.

#include <boost/beast/http/message.hpp>
#include <string>
#include <string_view>

#include "fence/canonical_path.h"

namespace fencegate::proxy {

// "" when the head is acceptable, else what is wrong (for the 400 body).
// Refuses: Transfer-Encoding on HTTP/1.0; Transfer-Encoding with
// Content-Length; Transfer-Encoding fields that are not a well-formed list
// of transfer codings (RFC 9112 6.1), whose last coding is not chunked, or
// that name chunked twice; more than one Content-Length (even equal); an
// empty or non-numeric Content-Length; more than one Host, or on HTTP/1.1
// none; a Host with whitespace or a comma (obs-fold into Host); NUL, CR or
// LF in any field value. A well-formed list ending in chunked that is not
// chunked alone ("gzip, chunked") passes here: CheckHead answers it 501.
std::string CheckRequestHead(const boost::beast::http::request_header<>& req);

// Turns an absolute-form target ("http://host:port/p?q") into origin-form
// ("/p?q") when its authority is the request's Host (RFC 9112 3.2.2).
// Returns "" and sets *origin on success; otherwise the reason for a 400
// (another host, another scheme, malformed).
std::string AbsoluteToOrigin(std::string_view target, std::string_view host,
                             std::string* origin);

// What CheckHead found wrong with a head; ok() when it may go on to routing.
struct HeadProblem {
  // The error code: "bad_request" (framing), "bad_path", or with 501
  // "not_implemented" (a transfer coding fencegate does not forward).
  std::string code;
  std::string message;  // for the error body
  bool close = false;   // the framing or target is ambiguous: close after the answer
  boost::beast::http::status status = boost::beast::http::status::bad_request;
  bool ok() const { return code.empty(); }
};

// Everything the session checks on a head Beast has parsed, before routing,
// in this order: framing (CheckRequestHead), then transfer codings other
// than chunked alone (501, close), an absolute-form target
// (AbsoluteToOrigin against Host; "*" and origin-form are left alone), then
// the canonical path (CanonicalizeTarget). On success fills *target; on a
// problem *target is left untouched.
HeadProblem CheckHead(const boost::beast::http::request_header<>& req, CanonicalTarget* target);

}  // namespace fencegate::proxy
