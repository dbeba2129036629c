// The framing decision, for the heads head_writer.cc writes and for the
// session that picks how a response is relayed.

#include "proxy/framing.h"

#include <boost/beast/http/field.hpp>

namespace fencegate::proxy {

namespace http = boost::beast::http;

namespace detail {

ResponsePlan PlanResponse(const http::response_parser<http::buffer_body>& parser, bool head_request,
                          bool client_http11, bool keep_alive) {
  const auto& res = parser.get();
  ResponsePlan plan;
  if (head_request || BodilessStatus(res.result_int())) {
    if (auto length = res.find(http::field::content_length); length != res.end()) {
      plan.copied_length = &*length;
    }
  } else if (auto length = parser.content_length()) {
    plan.length = length;
  } else {
    // Chunked or delimited by EOF upstream: chunk it for HTTP/1.1 clients,
    // delimit by close for HTTP/1.0 ones.
    plan.framing.close_delimited = !parser.chunked();
    if (client_http11) {
      plan.framing.chunked = true;
    } else {
      keep_alive = false;
    }
  }
  plan.framing.keep_alive = keep_alive;
  return plan;
}

}  // namespace detail

bool BodilessStatus(unsigned status) {
  return status / 100 == 1 || status == 204 || status == 304;
}

DownstreamFraming DecideDownstreamFraming(const http::response_parser<http::buffer_body>& parser,
                                          bool head_request, bool client_http11, bool keep_alive) {
  return detail::PlanResponse(parser, head_request, client_http11, keep_alive).framing;
}

}  // namespace fencegate::proxy
