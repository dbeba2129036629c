#include "proxy/replay.h"

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/status.hpp>

#include "proxy/head_sinks.h"
#include "proxy/hop_by_hop.h"

namespace fencegate::proxy {

namespace http = boost::beast::http;

void CaptureResponseHead(const http::response_parser<http::buffer_body>& parser,
                         storage::StoredResponse* out) {
  const auto& res = parser.get();
  out->status = static_cast<uint16_t>(res.result_int());
  out->headers.clear();
  out->body.clear();
  out->body_kept = true;
  out->body_bytes = 0;
  detail::ForEachEndToEndField(res.base(), {}, [out](const http::fields::value_type& f) {
    if (boost::beast::iequals(f.name_string(), "X-Request-Id")) return;
    out->headers.emplace_back(f.name_string(), f.value());
  });
}

bool ReplayHasBody(unsigned status) { return status >= 200 && status != 204 && status != 304; }

void AppendReplayHead(const storage::StoredResponse& stored, bool client_http11, bool keep_alive,
                      std::string_view request_id, std::string* out) {
  detail::TextSink sink(out);
  const http::status known = http::int_to_status(stored.status);
  sink.StatusLine(stored.status,
                  known == http::status::unknown ? std::string_view{}
                                                 : std::string_view(http::obsolete_reason(known)),
                  client_http11 ? 11 : 10);
  for (const auto& [name, value] : stored.headers) detail::AppendField(name, value, out);
  if (ReplayHasBody(stored.status)) sink.ContentLength(stored.body.size());
  detail::AppendField("Idempotent-Replayed", "true", out);
  sink.KeepAlive(keep_alive);
  detail::AppendField("X-Request-Id", request_id, out);
  sink.End();
}

}  // namespace fencegate::proxy
