#include "proxy/headers.h"

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/beast/http/rfc7230.hpp>
#include <string>
#include <vector>

namespace fencegate::proxy {

namespace http = boost::beast::http;
using boost::beast::iequals;

namespace {

bool IsHopByHop(http::field f) {
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

}  // namespace

void CopyEndToEndFields(const http::fields& from, http::fields& to, std::string_view skip) {
  std::vector<std::string> named;  // fields the Connection header lists
  for (auto it = from.find(http::field::connection); it != from.end() &&
                                                     it->name() == http::field::connection;
       ++it) {
    for (auto token : http::token_list{it->value()}) named.emplace_back(token);
  }
  for (const auto& field : from) {
    if (IsHopByHop(field.name())) continue;
    std::string_view name = field.name_string();
    if (!skip.empty() && iequals(name, skip)) continue;
    bool listed = false;
    for (const auto& n : named) listed = listed || iequals(n, name);
    if (listed) continue;
    to.insert(field.name(), name, field.value());
  }
}

bool ExpectsContinue(const http::fields& fields) {
  auto it = fields.find(http::field::expect);
  return it != fields.end() && iequals(it->value(), "100-continue");
}

}  // namespace fencegate::proxy
