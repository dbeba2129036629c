#pragma once
// Hop-by-hop rules (RFC 9110 section 7.6.1): which fields of a message are
// end-to-end and may be copied to the next hop, and which belong to one
// connection only and are dropped. Framing (Content-Length,
// Transfer-Encoding) is never copied: fencegate re-frames every message.

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/beast/http/fields.hpp>
#include <boost/beast/http/rfc7230.hpp>
#include <boost/container/small_vector.hpp>
#include <string_view>

#include "proxy/forwarding.h"

namespace fencegate::proxy {

// Copies every end-to-end field of `from` into `to`, skipping hop-by-hop
// fields, the fields that the Connection header names, framing fields, and
// `Expect` (fencegate answers 100-continue itself). `skip` names one more
// field to drop (e.g. the token header when it is not forwarded); empty = none.
void CopyEndToEndFields(const boost::beast::http::fields& from, boost::beast::http::fields& to,
                        std::string_view skip = {});

// True when the request carries "Expect: 100-continue".
bool ExpectsContinue(const boost::beast::http::fields& fields);

namespace detail {

namespace http = boost::beast::http;

inline bool IsHopByHop(http::field f) {
  switch (f) {
    case http::field::connection:
    case http::field::keep_alive:
    case http::field::proxy_connection:
    case http::field::te:
    case http::field::trailer:
    case http::field::upgrade:
    case http::field::transfer_encoding:
    case http::field::content_length:
    case http::field::proxy_authorization:
    case http::field::proxy_authenticate:
    case http::field::expect:
      return true;
    default:
      return false;
  }
}

// Calls fn(field) for each field of `from` that CopyEndToEndFields copies,
// in `from`'s order. A Beast container keeps fields of one name together
// (insert puts a repeat after the last of its name), and every rule here
// drops or keeps all fields of one name alike, so appending the fields in
// this order anywhere yields the order Beast's insert would give.
template <class Fn>
void ForEachEndToEndField(const http::fields& from, std::string_view skip, Fn&& fn) {
  // The fields the Connection header lists: views into `from`'s values.
  boost::container::small_vector<std::string_view, 4> named;
  for (auto it = from.find(http::field::connection);
       it != from.end() && it->name() == http::field::connection; ++it) {
    for (auto token : http::token_list{it->value()}) named.emplace_back(token);
  }
  for (const auto& field : from) {
    if (IsHopByHop(field.name())) continue;
    std::string_view name = field.name_string();
    if (!skip.empty() && boost::beast::iequals(name, skip)) continue;
    if (IsForwardingField(name)) continue;
    bool listed = false;
    for (auto n : named) listed = listed || boost::beast::iequals(n, name);
    if (listed) continue;
    fn(field);
  }
}

}  // namespace detail
}  // namespace fencegate::proxy
