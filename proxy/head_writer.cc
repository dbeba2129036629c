// Writing the heads: EmitUpstreamRequest and EmitDownstreamResponse say
// once what each head holds, in order; the sinks (head_sinks.h) make a
// Beast message or the bytes of one from it.

#include "proxy/head_writer.h"

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/beast/http/status.hpp>
#include <charconv>
#include <optional>
#include <string>
#include <string_view>

#include "proxy/forwarding.h"
#include "proxy/head_sinks.h"
#include "proxy/hop_by_hop.h"

namespace fencegate::proxy {

namespace http = boost::beast::http;
using boost::beast::iequals;
using namespace std::string_view_literals;

namespace {

using detail::EmitForwardingFields;
using detail::ForEachEndToEndField;
using detail::MessageSink;
using detail::SetField;
using detail::TextSink;

// BuildUpstreamRequest, into a sink.
template <class Sink>
void EmitUpstreamRequest(const http::request_parser<http::buffer_body>& parser,
                         const CanonicalTarget& target, const config::Config& config,
                         std::string_view client_ip, std::string_view request_id,
                         const CanonicalDestination* destination, Sink& sink) {
  const auto& req = parser.get();
  std::string& line = sink.BeginRequestLine(req.base());
  line.append(config.upstream.base_path).append(target.forward);
  if (target.has_query) line.append("?"sv).append(target.query);
  sink.EndRequestLine(11);
  bool has_host = false;
  ForEachEndToEndField(req.base(),
                       config.fencing.forward_token ? std::string_view{}
                                                    : std::string_view{config.fencing.token_header},
                       [&](const http::fields::value_type& f) {
                         has_host = has_host || f.name() == http::field::host;
                         if (destination != nullptr && iequals(f.name_string(), "Destination")) {
                           return;
                         }
                         sink.Insert(f);
                       });
  EmitForwardingFields(req.base(), client_ip, config.forwarding.trusted_hops,
                       config.tls.enabled ? "https" : "http", sink);
  if (destination != nullptr) {
    sink.BeginField("Destination")
        .append(destination->origin)
        .append(config.upstream.base_path)
        .append(destination->target.forward);
    sink.EndField();
  }
  SetField(sink, "X-Request-Id", request_id);
  if (!has_host) {
    char port[8];
    auto [end, ec] = std::to_chars(port, port + sizeof port, config.upstream.port);
    std::string& host = sink.BeginField("Host");
    const std::string& name = config.upstream.host;
    if (name.find(':') != std::string::npos) {  // an IPv6 literal: in brackets
      host.append("["sv).append(name).append("]"sv);
    } else {
      host.append(name);
    }
    host.append(":"sv).append(port, end);
    sink.EndField();
  }
  if (auto length = parser.content_length()) {
    sink.ContentLength(*length);
  } else if (parser.chunked()) {
    sink.Chunked();
  }
  sink.End();
}

// BuildDownstreamResponse (and, with a request id, the session's
// set("X-Request-Id") after it), into a sink.
template <class Sink>
DownstreamFraming EmitDownstreamResponse(const http::response_parser<http::buffer_body>& parser,
                                         bool head_request, bool client_http11, bool keep_alive,
                                         std::optional<std::string_view> request_id, Sink& sink) {
  const auto& res = parser.get();
  const detail::ResponsePlan plan =
      detail::PlanResponse(parser, head_request, client_http11, keep_alive);
  sink.StatusLine(res.result_int(), res.reason(), client_http11 ? 11 : 10);
  ForEachEndToEndField(res.base(), {}, [&](const http::fields::value_type& f) { sink.Insert(f); });
  if (plan.copied_length != nullptr) {
    SetField(sink, "Content-Length", plan.copied_length->value());
  } else if (plan.length) {
    sink.ContentLength(*plan.length);
  } else if (plan.framing.chunked) {
    sink.Chunked();
  }
  sink.KeepAlive(plan.framing.keep_alive);
  if (request_id) SetField(sink, "X-Request-Id", *request_id);
  sink.End();
  return plan.framing;
}

}  // namespace

void BuildUpstreamRequest(const http::request_parser<http::buffer_body>& parser,
                          const CanonicalTarget& target, const config::Config& config,
                          std::string_view client_ip, std::string_view request_id,
                          UpstreamRequest* out, const CanonicalDestination* destination) {
  *out = {};
  MessageSink sink(*out);
  EmitUpstreamRequest(parser, target, config, client_ip, request_id, destination, sink);
}

void AppendUpstreamHead(const http::request_parser<http::buffer_body>& parser,
                        const CanonicalTarget& target, const config::Config& config,
                        std::string_view client_ip, std::string_view request_id, std::string* out,
                        const CanonicalDestination* destination) {
  TextSink sink(out);
  EmitUpstreamRequest(parser, target, config, client_ip, request_id, destination, sink);
}

DownstreamFraming BuildDownstreamResponse(const http::response_parser<http::buffer_body>& parser,
                                          bool head_request, bool client_http11, bool keep_alive,
                                          DownstreamResponse* out) {
  *out = {};
  MessageSink sink(*out);
  return EmitDownstreamResponse(parser, head_request, client_http11, keep_alive, std::nullopt,
                                sink);
}

DownstreamFraming AppendDownstreamHead(const http::response_parser<http::buffer_body>& parser,
                                       bool head_request, bool client_http11, bool keep_alive,
                                       std::string_view request_id, std::string* out) {
  TextSink sink(out);
  return EmitDownstreamResponse(parser, head_request, client_http11, keep_alive, request_id, sink);
}

void AppendHead(const UpstreamRequest::header_type& h, std::string* out) {
  TextSink sink(out);
  sink.BeginRequestLine(h).append(h.target());
  sink.EndRequestLine(h.version());
  for (const auto& f : h) sink.Insert(f);
  sink.End();
}

void AppendHead(const DownstreamResponse::header_type& h, std::string* out) {
  TextSink sink(out);
  sink.StatusLine(h.result_int(), h.reason(), h.version());
  for (const auto& f : h) sink.Insert(f);
  sink.End();
}

}  // namespace fencegate::proxy
