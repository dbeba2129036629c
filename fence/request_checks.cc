#include "fence/request_checks.h"

#include <boost/beast/core/string.hpp>
#include <boost/url/parse.hpp>
#include <vector>

#include "fence/tchar.h"

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

// One transfer coding of a Transfer-Encoding list.
struct Coding {
  std::string_view name;
  bool parameters = false;
};

// What a request's Transfer-Encoding fields say, together (RFC 9112 6.1):
// transfer-coding = token *( OWS ";" OWS transfer-parameter ), in a
// comma-separated list whose empty elements are ignored.
enum class Codings {
  kChunked,      // exactly chunked: the body is de-chunked and re-framed
  kUnsupported,  // a well-formed list ending in chunked, but not chunked alone: 501
  kMalformed,    // the body's length cannot be determined from it: 400
};

class CodingScanner {
 public:
  explicit CodingScanner(std::string_view v) : v_(v) {}

  // Appends the codings of the value; false when it is not a well-formed list.
  bool Scan(std::vector<Coding>* out) {
    for (;;) {
      while (At(' ') || At('\t') || At(',')) ++pos_;  // OWS and empty elements
      if (pos_ == v_.size()) return true;
      Coding coding;
      coding.name = Token();
      if (coding.name.empty()) return false;
      SkipOws();
      while (At(';')) {
        ++pos_;
        SkipOws();
        if (Token().empty()) return false;
        SkipOws();
        if (!At('=')) return false;
        ++pos_;
        SkipOws();
        if (At('"') ? !QuotedString() : Token().empty()) return false;
        SkipOws();
        coding.parameters = true;
      }
      out->push_back(coding);
      if (pos_ < v_.size() && !At(',')) return false;  // two tokens without a comma
    }
  }

 private:
  bool At(char c) const { return pos_ < v_.size() && v_[pos_] == c; }
  void SkipOws() {
    while (At(' ') || At('\t')) ++pos_;
  }
  std::string_view Token() {
    size_t start = pos_;
    while (pos_ < v_.size() && IsTchar(static_cast<unsigned char>(v_[pos_]))) ++pos_;
    return v_.substr(start, pos_ - start);
  }
  // RFC 9110 5.6.4, from the opening quote.
  bool QuotedString() {
    ++pos_;
    while (pos_ < v_.size()) {
      const auto c = static_cast<unsigned char>(v_[pos_++]);
      if (c == '"') return true;
      if (c == '\\') {
        if (pos_ == v_.size()) return false;
        const auto q = static_cast<unsigned char>(v_[pos_++]);
        if (q != '\t' && (q < 0x20 || q == 0x7f)) return false;
      } else if (c != '\t' && (c < 0x20 || c == 0x7f)) {
        return false;
      }
    }
    return false;
  }

  std::string_view v_;
  size_t pos_ = 0;
};

// Classifies the request's Transfer-Encoding fields (there is at least one);
// *why says what is wrong for kUnsupported and kMalformed.
Codings ClassifyCodings(const http::request_header<>& req, std::string* why) {
  std::vector<Coding> codings;
  auto range = req.equal_range(http::field::transfer_encoding);
  for (auto it = range.first; it != range.second; ++it) {
    if (!CodingScanner(it->value()).Scan(&codings)) {
      *why = "malformed Transfer-Encoding";
      return Codings::kMalformed;
    }
  }
  // RFC 9112 6.3: unless chunked is the final coding, the length of a
  // request's body cannot be determined.
  if (codings.empty() || !iequals(codings.back().name, "chunked")) {
    *why = "the last Transfer-Encoding must be chunked";
    return Codings::kMalformed;
  }
  // RFC 9112 6.1: a sender must not apply chunked more than once.
  for (size_t i = 0; i + 1 < codings.size(); ++i) {
    if (iequals(codings[i].name, "chunked")) {
      *why = "chunked may be applied only once";
      return Codings::kMalformed;
    }
  }
  if (codings.size() == 1 && !codings[0].parameters) return Codings::kChunked;
  // Any other coding would reach the backend without its Transfer-Encoding
  // (fencegate re-frames the body and sends only chunked), so the backend
  // would take coded bytes for the body.
  std::string list;
  for (const Coding& c : codings) {
    if (!list.empty()) list += ", ";
    list += c.name;
    if (c.parameters) list += ";...";
  }
  *why = "fencegate forwards only Transfer-Encoding: chunked (this request's is " + list + ")";
  return Codings::kUnsupported;
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
    std::string why;
    if (ClassifyCodings(req, &why) == Codings::kMalformed) return why;
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
  if (req.count(http::field::transfer_encoding) > 0) {
    // Well-formed (CheckRequestHead), but maybe a coding fencegate does not
    // forward: its body is not read, so the connection cannot go on.
    std::string why;
    if (ClassifyCodings(req, &why) == Codings::kUnsupported) {
      return HeadProblem{"not_implemented", std::move(why), true, http::status::not_implemented};
    }
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
