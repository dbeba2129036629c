#pragma once
// The forwarding fields fencegate sets on every upstream request:
// X-Forwarded-For, X-Forwarded-Proto and Forwarded (X-Request-Id is the
// fourth field it sets itself: request_id.h). A client's own values are
// trusted only as far as forwarding.trusted_hops says.

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/fields.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "proxy/head_sinks.h"

namespace fencegate::proxy {

// Fields fencegate sets itself on the upstream request, so CopyEndToEndFields
// leaves them out: X-Forwarded-For, X-Forwarded-Proto, Forwarded, X-Request-Id.
inline bool IsForwardingField(std::string_view name) {
  using boost::beast::iequals;
  return iequals(name, "X-Forwarded-For") || iequals(name, "X-Forwarded-Proto") ||
         iequals(name, "Forwarded") || iequals(name, "X-Request-Id");
}

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

namespace detail {

// All values of `name`, joined as one comma-separated list.
std::vector<std::string_view> ListValues(const http::fields& in, std::string_view name);

// Appends the last `count` items of `name`'s list, each followed by ", ".
void AppendLastItems(const http::fields& in, std::string_view name, unsigned count,
                     std::string& out);

// SetForwardingFields, into a sink.
template <class Sink>
void EmitForwardingFields(const http::fields& in, std::string_view client_ip, unsigned trusted_hops,
                          std::string_view own_proto, Sink& sink) {
  std::string_view proto = own_proto;
  if (trusted_hops > 0) {
    auto protos = ListValues(in, "X-Forwarded-Proto");
    if (!protos.empty()) proto = protos.back();  // a view into `in`, which is not changed
  }
  std::string& xff = sink.BeginField("X-Forwarded-For");
  if (trusted_hops > 0) AppendLastItems(in, "X-Forwarded-For", trusted_hops, xff);
  xff.append(client_ip);
  sink.EndField();
  SetField(sink, "X-Forwarded-Proto", proto);
  std::string& forwarded = sink.BeginField("Forwarded");
  if (trusted_hops > 0) AppendLastItems(in, "Forwarded", trusted_hops, forwarded);
  forwarded.append("for="sv);
  if (client_ip.find(':') != std::string_view::npos) {
    forwarded.append("\"["sv).append(client_ip).append("]\""sv);
  } else {
    forwarded.append(client_ip);
  }
  forwarded.append(";proto="sv).append(proto);
  sink.EndField();
}

}  // namespace detail
}  // namespace fencegate::proxy
