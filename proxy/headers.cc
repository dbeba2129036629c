#include "proxy/headers.h"

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/beast/http/rfc7230.hpp>
#include <random>
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
    if (IsForwardingField(name)) continue;
    bool listed = false;
    for (const auto& n : named) listed = listed || iequals(n, name);
    if (listed) continue;
    to.insert(field.name(), name, field.value());
  }
}

bool IsForwardingField(std::string_view name) {
  return iequals(name, "X-Forwarded-For") || iequals(name, "X-Forwarded-Proto") ||
         iequals(name, "Forwarded") || iequals(name, "X-Request-Id");
}

namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// All values of `name`, joined as one comma-separated list.
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

}  // namespace

void SetForwardingFields(const http::fields& in, http::fields& out, std::string_view client_ip,
                         unsigned trusted_hops, std::string_view own_proto) {
  std::string xff;
  std::string forwarded;
  std::string proto(own_proto);
  if (trusted_hops > 0) {
    auto hops = ListValues(in, "X-Forwarded-For");
    size_t first = hops.size() > trusted_hops ? hops.size() - trusted_hops : 0;
    for (size_t i = first; i < hops.size(); ++i) xff.append(hops[i]).append(", ");
    auto fwd = ListValues(in, "Forwarded");
    size_t ffirst = fwd.size() > trusted_hops ? fwd.size() - trusted_hops : 0;
    for (size_t i = ffirst; i < fwd.size(); ++i) forwarded.append(fwd[i]).append(", ");
    auto protos = ListValues(in, "X-Forwarded-Proto");
    if (!protos.empty()) proto = std::string(protos.back());
  }
  xff.append(client_ip);
  bool v6 = client_ip.find(':') != std::string_view::npos;
  forwarded.append("for=");
  if (v6) {
    forwarded.append("\"[").append(client_ip).append("]\"");
  } else {
    forwarded.append(client_ip);
  }
  forwarded.append(";proto=").append(proto);
  out.set("X-Forwarded-For", xff);
  out.set("X-Forwarded-Proto", proto);
  out.set(http::field::forwarded, forwarded);
}

bool IsValidRequestId(std::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.' || c == ':';
    if (!ok) return false;
  }
  return true;
}

std::string NewRequestId() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id(32, '0');
  for (int half = 0; half < 2; ++half) {
    uint64_t v = rng();
    for (int i = 0; i < 16; ++i) id[half * 16 + i] = kHex[(v >> (i * 4)) & 0xF];
  }
  return id;
}

bool ExpectsContinue(const http::fields& fields) {
  auto it = fields.find(http::field::expect);
  return it != fields.end() && iequals(it->value(), "100-continue");
}

void BuildUpstreamRequest(const http::request_parser<http::buffer_body>& parser,
                          const CanonicalTarget& target, const config::Config& config,
                          std::string_view client_ip, std::string_view request_id,
                          UpstreamRequest* out) {
  const auto& req = parser.get();
  *out = {};
  if (req.method() != http::verb::unknown) {
    out->method(req.method());
  } else {
    out->method_string(req.method_string());
  }
  std::string path = config.upstream.base_path + target.path;
  if (target.has_query) path.append("?").append(target.query);
  out->target(path);
  out->version(11);
  CopyEndToEndFields(req.base(), out->base(),
                     config.fencing.forward_token ? std::string_view{}
                                                  : std::string_view{config.fencing.token_header});
  SetForwardingFields(req.base(), out->base(), client_ip, config.forwarding.trusted_hops,
                      config.tls.enabled ? "https" : "http");
  out->set("X-Request-Id", request_id);
  if (out->find(http::field::host) == out->end()) {
    out->set(http::field::host, config.upstream.host + ":" + std::to_string(config.upstream.port));
  }
  if (auto length = parser.content_length()) {
    out->content_length(*length);
  } else if (parser.chunked()) {
    out->chunked(true);
  }
}

bool BodilessStatus(unsigned status) {
  return status / 100 == 1 || status == 204 || status == 304;
}

DownstreamFraming BuildDownstreamResponse(const http::response_parser<http::buffer_body>& parser,
                                          bool head_request, bool client_http11,
                                          bool keep_alive, DownstreamResponse* out) {
  const auto& res = parser.get();
  DownstreamFraming framing;
  *out = {};
  out->result(res.result_int());
  out->reason(res.reason());
  out->version(client_http11 ? 11 : 10);
  CopyEndToEndFields(res.base(), out->base());
  if (head_request || BodilessStatus(res.result_int())) {
    if (auto length = res.find(http::field::content_length); length != res.end()) {
      out->set(http::field::content_length, length->value());
    }
  } else if (auto length = parser.content_length()) {
    out->content_length(*length);
  } else {
    // Chunked or delimited by EOF upstream: chunk it for HTTP/1.1 clients,
    // delimit by close for HTTP/1.0 ones.
    framing.close_delimited = !parser.chunked();
    if (client_http11) {
      out->chunked(true);
    } else {
      keep_alive = false;
    }
  }
  out->keep_alive(keep_alive);
  framing.keep_alive = keep_alive;
  return framing;
}

namespace {

void AppendFields(const http::fields& fields, std::string* out) {
  for (const auto& f : fields) {
    out->append(f.name_string());
    out->append(": ");
    out->append(f.value());
    out->append("\r\n");
  }
  out->append("\r\n");
}

void AppendVersion(unsigned version, std::string* out) {
  out->append("HTTP/");
  out->push_back(static_cast<char>('0' + version / 10));
  out->push_back('.');
  out->push_back(static_cast<char>('0' + version % 10));
}

}  // namespace

void AppendHead(const UpstreamRequest::header_type& h, std::string* out) {
  out->append(h.method_string());
  out->push_back(' ');
  out->append(h.target());
  out->push_back(' ');
  AppendVersion(h.version(), out);
  out->append("\r\n");
  AppendFields(h, out);
}

void AppendHead(const DownstreamResponse::header_type& h, std::string* out) {
  AppendVersion(h.version(), out);
  unsigned code = h.result_int();
  out->push_back(' ');
  out->push_back(static_cast<char>('0' + code / 100));
  out->push_back(static_cast<char>('0' + (code / 10) % 10));
  out->push_back(static_cast<char>('0' + code % 10));
  out->push_back(' ');
  out->append(h.reason());
  out->append("\r\n");
  AppendFields(h, out);
}

}  // namespace fencegate::proxy
