// The forwarding fields: a client's list values, kept as far as the trusted
// hops go, and the peer appended.

#include "proxy/forwarding.h"

#include <boost/beast/http/fields.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "proxy/head_sinks.h"

namespace fencegate::proxy {
namespace detail {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsOws(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsOws(s.back())) s.remove_suffix(1);
  return s;
}

}  // namespace

std::vector<std::string_view> ListValues(const http::fields& in, std::string_view name) {
  std::vector<std::string_view> items;
  auto range = in.equal_range(name);
  for (auto it = range.first; it != range.second; ++it) {
    std::string_view v = it->value();
    size_t start = 0;
    while (start <= v.size()) {
      size_t comma = v.find(',', start);
      if (comma == std::string_view::npos) comma = v.size();
      std::string_view item = Trim(v.substr(start, comma - start));
      if (!item.empty()) items.push_back(item);
      start = comma + 1;
    }
  }
  return items;
}

void AppendLastItems(const http::fields& in, std::string_view name, unsigned count,
                     std::string& out) {
  auto items = ListValues(in, name);
  size_t first = items.size() > count ? items.size() - count : 0;
  for (size_t i = first; i < items.size(); ++i) out.append(items[i]).append(", "sv);
}

}  // namespace detail

void SetForwardingFields(const boost::beast::http::fields& in, boost::beast::http::fields& out,
                         std::string_view client_ip, unsigned trusted_hops,
                         std::string_view own_proto) {
  detail::FieldsSink sink(out);
  detail::EmitForwardingFields(in, client_ip, trusted_hops, own_proto, sink);
}

}  // namespace fencegate::proxy
