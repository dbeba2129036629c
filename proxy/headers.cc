#include "proxy/headers.h"

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/beast/http/rfc7230.hpp>
#include <boost/beast/http/status.hpp>
#include <boost/container/small_vector.hpp>
#include <charconv>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace fencegate::proxy {

namespace http = boost::beast::http;
using boost::beast::iequals;
using namespace std::string_view_literals;

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
    if (!skip.empty() && iequals(name, skip)) continue;
    if (IsForwardingField(name)) continue;
    bool listed = false;
    for (auto n : named) listed = listed || iequals(n, name);
    if (listed) continue;
    fn(field);
  }
}

// --- Where a head goes: the two sinks.
//
// The emitters below (EmitForwardingFields, EmitUpstreamRequest,
// EmitDownstreamResponse) say once what a head holds and in which order.
// A sink receives it: MessageSink into a Beast message, whose container and
// setters (set, content_length, chunked, keep_alive) decide the stored
// fields, which AppendHead then writes; TextSink appends the bytes AppendHead
// would write for that message, directly. TextSink relies on what the
// emitters guarantee: every field set by name is absent from the head
// before (forwarding fields and X-Request-Id are never copied, Host is set
// only when none was, framing and Connection are hop-by-hop), so a Beast
// set() is an append there.
//
// Operations: BeginRequestLine(req) returns a string to append the target to,
// EndRequestLine(version); StatusLine(status, reason, version);
// Insert(field) copies an end-to-end field; BeginField(name) returns a
// string to append the value to, EndField() sets it; ContentLength(n),
// Chunked(), KeepAlive(keep) frame as Beast's message setters do; End().

void AppendVersion(unsigned version, std::string* out) {
  out->append("HTTP/"sv);
  out->push_back(static_cast<char>('0' + version / 10));
  out->push_back('.');
  out->push_back(static_cast<char>('0' + version % 10));
}

void AppendField(std::string_view name, std::string_view value, std::string* out) {
  out->append(name);
  out->append(": "sv);
  out->append(value);
  out->append("\r\n"sv);
}

bool IsOws(char c) { return c == ' ' || c == '\t'; }

class TextSink {
 public:
  explicit TextSink(std::string* out) : out_(out) {}

  std::string& BeginRequestLine(const http::request_header<>& from) {
    out_->append(from.method_string());
    out_->push_back(' ');
    return *out_;
  }
  void EndRequestLine(unsigned version) {
    out_->push_back(' ');
    AppendVersion(version, out_);
    out_->append("\r\n"sv);
    version_ = version;
  }
  void StatusLine(unsigned status, std::string_view reason, unsigned version) {
    AppendVersion(version, out_);
    out_->push_back(' ');
    out_->push_back(static_cast<char>('0' + status / 100));
    out_->push_back(static_cast<char>('0' + (status / 10) % 10));
    out_->push_back(static_cast<char>('0' + status % 10));
    out_->push_back(' ');
    out_->append(reason);
    out_->append("\r\n"sv);
    version_ = version;
  }
  // A value in a Beast container is already trimmed (its insert trims).
  void Insert(const http::fields::value_type& f) { AppendField(f.name_string(), f.value(), out_); }
  std::string& BeginField(std::string_view name) {
    out_->append(name);
    out_->append(": "sv);
    value_start_ = out_->size();
    return *out_;
  }
  // Beast's set() stores the value without leading and trailing spaces and
  // tabs (e.g. X-Forwarded-For's trailing ", " when the client address is
  // unknown): trimmed alike here.
  void EndField() {
    size_t end = out_->size();
    while (end > value_start_ && IsOws((*out_)[end - 1])) --end;
    out_->resize(end);
    size_t begin = value_start_;
    while (begin < end && IsOws((*out_)[begin])) ++begin;
    out_->erase(value_start_, begin - value_start_);
    out_->append("\r\n"sv);
  }
  void ContentLength(uint64_t length) {
    char digits[24];
    auto [end, ec] = std::to_chars(digits, digits + sizeof digits, length);
    AppendField("Content-Length", std::string_view(digits, static_cast<size_t>(end - digits)),
                out_);
  }
  void Chunked() { AppendField("Transfer-Encoding", "chunked", out_); }
  // What Beast's keep_alive(bool) sets on a head without a Connection field:
  // HTTP/1.1 names only close, HTTP/1.0 only keep-alive.
  void KeepAlive(bool keep_alive) {
    if (version_ >= 11 && !keep_alive) AppendField("Connection", "close", out_);
    if (version_ < 11 && keep_alive) AppendField("Connection", "keep-alive", out_);
  }
  void End() { out_->append("\r\n"sv); }

 private:
  std::string* out_;
  size_t value_start_ = 0;
  unsigned version_ = 11;
};

class FieldsSink {
 public:
  explicit FieldsSink(http::fields& fields) : fields_(fields) {}

  void Insert(const http::fields::value_type& f) {
    fields_.insert(f.name(), f.name_string(), f.value());
  }
  std::string& BeginField(std::string_view name) {
    name_ = name;
    value_.clear();
    return value_;
  }
  void EndField() { fields_.set(name_, value_); }

 private:
  http::fields& fields_;
  std::string_view name_;
  std::string value_;
};

template <class Message>
class MessageSink : public FieldsSink {
 public:
  explicit MessageSink(Message& message) : FieldsSink(message), message_(message) {}

  std::string& BeginRequestLine(const http::request_header<>& from) {
    if (from.method() != http::verb::unknown) {
      message_.method(from.method());
    } else {
      message_.method_string(from.method_string());
    }
    target_.clear();
    return target_;
  }
  void EndRequestLine(unsigned version) {
    message_.target(target_);
    message_.version(version);
  }
  void StatusLine(unsigned status, std::string_view reason, unsigned version) {
    message_.result(status);
    message_.reason(reason);
    message_.version(version);
  }
  void ContentLength(uint64_t length) { message_.content_length(length); }
  void Chunked() { message_.chunked(true); }
  void KeepAlive(bool keep_alive) { message_.keep_alive(keep_alive); }
  void End() {}

 private:
  Message& message_;
  std::string target_;
};

template <class Sink>
void SetField(Sink& sink, std::string_view name, std::string_view value) {
  sink.BeginField(name).append(value);
  sink.EndField();
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsOws(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsOws(s.back())) s.remove_suffix(1);
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

// Appends the last `count` items of `name`'s list, each followed by ", ".
void AppendLastItems(const http::fields& in, std::string_view name, unsigned count,
                     std::string& out) {
  auto items = ListValues(in, name);
  size_t first = items.size() > count ? items.size() - count : 0;
  for (size_t i = first; i < items.size(); ++i) out.append(items[i]).append(", "sv);
}

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

// The response's framing, decided in this one place.
struct ResponsePlan {
  DownstreamFraming framing;
  // A HEAD request or a bodiless status: the upstream Content-Length as is.
  const http::fields::value_type* copied_length = nullptr;
  boost::optional<uint64_t> length;  // else the upstream's length, if it gave one
};

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

// BuildDownstreamResponse (and, with a request id, the session's
// set("X-Request-Id") after it), into a sink.
template <class Sink>
DownstreamFraming EmitDownstreamResponse(const http::response_parser<http::buffer_body>& parser,
                                         bool head_request, bool client_http11, bool keep_alive,
                                         std::optional<std::string_view> request_id, Sink& sink) {
  const auto& res = parser.get();
  const ResponsePlan plan = PlanResponse(parser, head_request, client_http11, keep_alive);
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

void CopyEndToEndFields(const http::fields& from, http::fields& to, std::string_view skip) {
  FieldsSink sink(to);
  ForEachEndToEndField(from, skip, [&](const http::fields::value_type& f) { sink.Insert(f); });
}

bool IsForwardingField(std::string_view name) {
  return iequals(name, "X-Forwarded-For") || iequals(name, "X-Forwarded-Proto") ||
         iequals(name, "Forwarded") || iequals(name, "X-Request-Id");
}

void SetForwardingFields(const http::fields& in, http::fields& out, std::string_view client_ip,
                         unsigned trusted_hops, std::string_view own_proto) {
  FieldsSink sink(out);
  EmitForwardingFields(in, client_ip, trusted_hops, own_proto, sink);
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

void NewRequestId(std::string* id) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  id->resize(32);
  char* out = id->data();
  for (int half = 0; half < 2; ++half) {
    uint64_t v = rng();
    for (int i = 0; i < 16; ++i) out[half * 16 + i] = kHex[(v >> (i * 4)) & 0xF];
  }
}

bool ExpectsContinue(const http::fields& fields) {
  auto it = fields.find(http::field::expect);
  return it != fields.end() && iequals(it->value(), "100-continue");
}

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

bool BodilessStatus(unsigned status) {
  return status / 100 == 1 || status == 204 || status == 304;
}

DownstreamFraming BuildDownstreamResponse(const http::response_parser<http::buffer_body>& parser,
                                          bool head_request, bool client_http11, bool keep_alive,
                                          DownstreamResponse* out) {
  *out = {};
  MessageSink sink(*out);
  return EmitDownstreamResponse(parser, head_request, client_http11, keep_alive, std::nullopt,
                                sink);
}

DownstreamFraming DecideDownstreamFraming(const http::response_parser<http::buffer_body>& parser,
                                          bool head_request, bool client_http11, bool keep_alive) {
  return PlanResponse(parser, head_request, client_http11, keep_alive).framing;
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
