#include "proxy/request_checks.h"

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/rfc7230.hpp>
#include <boost/url/parse.hpp>

namespace fencegate::proxy {

namespace http = boost::beast::http;
using boost::beast::iequals;

namespace {

// One comparison pass without an early exit, which the compiler can
// vectorise (string_view::find_first_of calls memchr once per byte).
bool HasAnyOf3(std::string_view v, char a, char b, char c) {
  bool found = false;
  for (char x : v) found |= (x == a) | (x == b) | (x == c);
  return found;
}

bool AllDigits(std::string_view v) {
  if (v.empty()) return false;
  for (char c : v) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

}  // namespace

std::string CheckRequestHead(const http::request_header<>& req) {
  // One pass over the fields: their bytes, and the framing and Host fields
  // counted (the first Host's value kept), in the head's order.
  size_t te = 0;
  size_t cl = 0;
  size_t hosts = 0;
  std::string_view cl_value;
  std::string_view host_value;
  for (const auto& field : req) {
    std::string_view v = field.value();
    if (HasAnyOf3(v, '\0', '\r', '\n')) {
      return "header " + std::string(field.name_string()) +
             " contains a NUL, CR or LF byte";
    }
    switch (field.name()) {
      case http::field::transfer_encoding:
        ++te;
        break;
      case http::field::content_length:
        ++cl;
        cl_value = v;
        break;
      case http::field::host:
        if (hosts++ == 0) host_value = v;
        break;
      default:
        break;
    }
  }
  if (cl > 1) return "more than one Content-Length header";
  if (cl == 1 && !AllDigits(cl_value)) return "Content-Length must be a decimal number";
  if (te > 0) {
    if (req.version() < 11) return "Transfer-Encoding is not allowed in HTTP/1.0";
    if (cl > 0) return "Transfer-Encoding and Content-Length together are ambiguous";
    std::vector<std::string> codings;
    auto range = req.equal_range(http::field::transfer_encoding);
    for (auto it = range.first; it != range.second; ++it) {
      for (auto token : http::token_list{it->value()}) codings.emplace_back(token);
    }
    if (codings.empty() || !iequals(codings.back(), "chunked")) {
      return "the last Transfer-Encoding must be chunked";
    }
    for (size_t i = 0; i + 1 < codings.size(); ++i) {
      if (iequals(codings[i], "chunked")) return "chunked may be applied only once";
    }
  }
  // RFC 9112 3.2: more than one Host is an error in any request (it would
  // reach the backend as HTTP/1.1); only HTTP/1.1 must send one.
  if (hosts > 1) return "more than one Host header";
  if (hosts == 0 && req.version() >= 11) return "HTTP/1.1 requires a Host header";
  if (hosts == 1) {
    // uri-host [ ":" port ]: no whitespace (a folded line would add some).
    if (host_value.empty() && req.version() >= 11) return "empty Host header";
    if (HasAnyOf3(host_value, ' ', '\t', ',')) return "malformed Host header";
  }
  return "";
}

std::string AbsoluteToOrigin(std::string_view target, std::string_view host,
                             std::string* origin) {
  auto url = boost::urls::parse_absolute_uri(target);
  if (!url) return "malformed request target";
  if (!iequals(url->scheme(), "http")) return "absolute-form target with another scheme";
  std::string authority(url->encoded_authority());
  if (url->has_userinfo() || !iequals(authority, host)) {
    return "absolute-form target names another host than Host";
  }
  std::string out(url->encoded_path());
  if (out.empty()) out.push_back('/');
  if (url->has_query()) out.append("?").append(url->encoded_query());
  *origin = std::move(out);
  return "";
}

HeadProblem CheckHead(const http::request_header<>& req, CanonicalTarget* target) {
  if (std::string problem = CheckRequestHead(req); !problem.empty()) {
    // Framing is ambiguous: the rest of the stream cannot be trusted either.
    return HeadProblem{"bad_request", std::move(problem), true};
  }
  std::string_view path = req.target();
  std::string origin;
  if (!path.empty() && path.front() != '/' && path != "*") {
    auto host = req.find(http::field::host);
    std::string problem = AbsoluteToOrigin(
        path, host == req.end() ? std::string_view{} : std::string_view(host->value()), &origin);
    if (!problem.empty()) return HeadProblem{"bad_path", std::move(problem), true};
    path = origin;
  }
  PathError perr = CanonicalizeTarget(path, target);
  if (perr != PathError::kNone) return HeadProblem{"bad_path", PathErrorMessage(perr), false};
  return HeadProblem{};
}

}  // namespace fencegate::proxy
