// The URLs the configuration names: upstream.url and the etcd endpoints,
// parsed with Boost.URL.

#include <boost/url/parse.hpp>
#include <boost/url/url_view.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/readers.h"

namespace fencegate::config::internal {

bool ReadUpstreamUrl(YamlReader& r, const Field& f, UpstreamConfig* up) {
  static constexpr std::string_view kExpected =
      "an http or https URL with a host, e.g. http://127.0.0.1:9000 or https://backend:8443/base";
  std::string text;
  if (!r.NonEmptyString(f, kExpected, &text)) return false;
  auto parsed = boost::urls::parse_uri(text);
  if (!parsed) {
    return r.Fail(f, "'" + text + "' is not a URL: " + parsed.error().message(), kExpected);
  }
  const boost::urls::url_view& url = *parsed;
  const bool https = url.scheme_id() == boost::urls::scheme::https;
  if (!https && url.scheme_id() != boost::urls::scheme::http) {
    return r.Fail(f, "scheme '" + std::string(url.scheme()) + "' is not supported", kExpected);
  }
  if (url.has_userinfo()) return r.Fail(f, "must not contain user info ('user@')", kExpected);
  if (url.has_query()) return r.Fail(f, "must not contain a query ('?')", kExpected);
  if (url.has_fragment()) return r.Fail(f, "must not contain a fragment ('#')", kExpected);
  std::string host = url.host_address();
  bool host_ok = url.has_authority() && !host.empty() &&
                 url.host_type() != boost::urls::host_type::ipvfuture &&
                 url.encoded_host_address().find('%') == std::string_view::npos;
  if (!host_ok) return r.Fail(f, "'" + text + "' has no usable host", kExpected);

  uint16_t port = https ? 443 : 80;
  if (url.has_port() && !url.port().empty()) {
    std::optional<Endpoint> probe = ParseEndpoint("0.0.0.0:" + std::string(url.port()));
    if (!probe || probe->port == 0) {
      return r.Fail(f, "port '" + std::string(url.port()) + "' is not in 1..65535", kExpected);
    }
    port = probe->port;
  }
  std::string base_path(url.encoded_path());
  // Boost.URL 1.81 takes "http://h:80x" as port 80 and path "x"; RFC 3986
  // wants the path after an authority to be empty or to start with '/'.
  if (!base_path.empty() && base_path.front() != '/') {
    return r.Fail(f, "'" + text + "' is not a URL: after the host and port, the path must start "
                  "with '/'", kExpected);
  }
  while (!base_path.empty() && base_path.back() == '/') base_path.pop_back();

  up->url = std::move(text);
  up->https = https;
  up->host = std::move(host);
  up->port = port;
  up->base_path = std::move(base_path);
  return true;
}

bool ReadEtcdEndpoints(YamlReader& r, const Field& list, EtcdConfig* etcd) {
  static constexpr std::string_view kExpected =
      "a non-empty list of etcd URLs such as [\"http://127.0.0.1:2379\"]";
  static constexpr std::string_view kUrl =
      "an http:// or https:// URL with a host, e.g. https://10.0.0.1:2379";
  std::vector<std::string> endpoints;
  std::optional<bool> https;
  bool ok = r.Sequence(list, kExpected, [&](const Field& item) {
    std::string url;
    if (!r.NonEmptyString(item, kExpected, &url)) return false;
    auto parsed = boost::urls::parse_uri(url);
    bool is_https = parsed && parsed->scheme_id() == boost::urls::scheme::https;
    bool is_http = parsed && parsed->scheme_id() == boost::urls::scheme::http;
    if ((!is_http && !is_https) || parsed->host_address().empty()) {
      return r.Fail(item, "'" + url + "' is not an etcd URL", kUrl);
    }
    if (https && *https != is_https) {
      return r.Fail(item, "mixes http and https endpoints",
                    "the same scheme for every endpoint");
    }
    https = is_https;
    endpoints.push_back(std::move(url));
    return true;
  });
  if (!ok) return false;
  if (endpoints.empty()) return r.Fail(list, "is an empty list", kExpected);
  etcd->endpoints = std::move(endpoints);
  etcd->https = *https;
  return true;
}

}  // namespace fencegate::config::internal
