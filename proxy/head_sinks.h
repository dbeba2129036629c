#pragma once
// Where a head goes: the two serialisers behind the head emitters
// (head_writer.cc, forwarding.h). Internal to the head code of proxy/.
//
// An emitter says once what a head holds and in which order; a sink
// receives it. MessageSink writes into a Beast message, whose container and
// setters (set, content_length, chunked, keep_alive) decide the stored
// fields, which AppendHead then writes; TextSink appends the bytes
// AppendHead would write for that message, directly. TextSink relies on
// what the emitters guarantee: every field set by name is absent from the
// head before (forwarding fields and X-Request-Id are never copied, Host is
// set only when none was, framing and Connection are hop-by-hop), so a
// Beast set() is an append there.
//
// Operations: BeginRequestLine(req) returns a string to append the target
// to, EndRequestLine(version); StatusLine(status, reason, version);
// Insert(field) copies an end-to-end field; BeginField(name) returns a
// string to append the value to, EndField() sets it; ContentLength(n),
// Chunked(), KeepAlive(keep) frame as Beast's message setters do; End().
// FieldsSink, a plain field container's, has only Insert, BeginField and
// EndField.

#include <boost/beast/http/fields.hpp>
#include <boost/beast/http/message.hpp>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace fencegate::proxy::detail {

namespace http = boost::beast::http;
using namespace std::string_view_literals;

inline void AppendVersion(unsigned version, std::string* out) {
  out->append("HTTP/"sv);
  out->push_back(static_cast<char>('0' + version / 10));
  out->push_back('.');
  out->push_back(static_cast<char>('0' + version % 10));
}

inline void AppendField(std::string_view name, std::string_view value, std::string* out) {
  out->append(name);
  out->append(": "sv);
  out->append(value);
  out->append("\r\n"sv);
}

inline bool IsOws(char c) { return c == ' ' || c == '\t'; }

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

}  // namespace fencegate::proxy::detail
