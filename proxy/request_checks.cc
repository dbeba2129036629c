#include "proxy/request_checks.h"

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/rfc7230.hpp>
#include <boost/url/parse.hpp>

namespace fencegate::proxy {

namespace http = boost::beast::http;
using boost::beast::iequals;

namespace {

size_t Count(const http::request_header<>& req, http::field f) {
  auto range = req.equal_range(f);
  return static_cast<size_t>(std::distance(range.first, range.second));
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
  for (const auto& field : req) {
    std::string_view v = field.value();
    if (v.find_first_of(std::string_view("\0\r\n", 3)) != std::string_view::npos) {
      return "header " + std::string(field.name_string()) +
             " contains a NUL, CR or LF byte";
    }
  }
  size_t te = Count(req, http::field::transfer_encoding);
  size_t cl = Count(req, http::field::content_length);
  if (cl > 1) return "more than one Content-Length header";
  if (cl == 1 && !AllDigits(req[http::field::content_length])) {
    return "Content-Length must be a decimal number";
  }
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
  size_t hosts = Count(req, http::field::host);
  if (hosts > 1) return "more than one Host header";
  if (hosts == 0 && req.version() >= 11) return "HTTP/1.1 requires a Host header";
  if (auto host = req.find(http::field::host); host != req.end()) {
    // uri-host [ ":" port ]: no whitespace (a folded line would add some).
    std::string_view v = host->value();
    if (v.empty() && req.version() >= 11) return "empty Host header";
    if (v.find_first_of(" \t,") != std::string_view::npos) return "malformed Host header";
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
  if (out.empty()) out = "/";
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
