#pragma once
// Header hygiene between client and upstream: which fields are end-to-end
// and may be copied, and which belong to one connection only (RFC 9110
// section 7.6.1) and are dropped. Framing (Content-Length,
// Transfer-Encoding) is never copied: fencegate re-frames every message.

#include <boost/beast/http/fields.hpp>
#include <string_view>

namespace fencegate::proxy {

// Copies every end-to-end field of `from` into `to`, skipping hop-by-hop
// fields, the fields that the Connection header names, framing fields, and
// `Expect` (fencegate answers 100-continue itself). `skip` names one more
// field to drop (e.g. the token header when it is not forwarded); empty = none.
void CopyEndToEndFields(const boost::beast::http::fields& from, boost::beast::http::fields& to,
                        std::string_view skip = {});

// True when the request carries "Expect: 100-continue".
bool ExpectsContinue(const boost::beast::http::fields& fields);

}  // namespace fencegate::proxy
