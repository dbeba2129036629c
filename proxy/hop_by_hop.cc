// The hop-by-hop rules applied to a plain field container, and the one
// hop-by-hop field fencegate acts on itself (Expect: 100-continue).

#include "proxy/hop_by_hop.h"

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/beast/http/fields.hpp>
#include <string_view>

#include "proxy/head_sinks.h"

namespace fencegate::proxy {

namespace http = boost::beast::http;
using boost::beast::iequals;

void CopyEndToEndFields(const http::fields& from, http::fields& to, std::string_view skip) {
  detail::FieldsSink sink(to);
  detail::ForEachEndToEndField(from, skip,
                               [&](const http::fields::value_type& f) { sink.Insert(f); });
}

bool ExpectsContinue(const http::fields& fields) {
  auto it = fields.find(http::field::expect);
  return it != fields.end() && iequals(it->value(), "100-continue");
}

}  // namespace fencegate::proxy
