#include "admin/admin_request.h"

#include <algorithm>
#include <boost/beast/core/string.hpp>
#include <boost/url/pct_string_view.hpp>
#include <nlohmann/json.hpp>

#include "fence/router.h"

namespace fencegate::proxy {

namespace {
constexpr std::string_view kFenceSuffix = "/fence";
constexpr std::string_view kBearer = "Bearer ";
constexpr std::string_view kScopeParam = "scope=";

// Percent-decodes `text` into *out: false when it is not valid
// percent-encoding. '+' stays a plus sign.
bool Decode(std::string_view text, std::string* out) {
  auto pct = boost::urls::make_pct_string_view(text);
  if (!pct) return false;
  *out = pct->decode();
  return true;
}

// One path segment: not empty, no '/' or '?', and decoding to something.
bool DecodeSegment(std::string_view segment, std::string* out) {
  if (segment.empty() || segment.find_first_of("/?") != std::string_view::npos) return false;
  return Decode(segment, out) && !out->empty();
}
}  // namespace

bool ParseAdminKeyTarget(std::string_view target, std::string* key, bool* fence) {
  if (target.substr(0, kKeysPrefix.size()) != kKeysPrefix) return false;
  std::string_view rest = target.substr(kKeysPrefix.size());
  *fence = false;
  if (rest.size() > kFenceSuffix.size() &&
      rest.substr(rest.size() - kFenceSuffix.size()) == kFenceSuffix) {
    rest.remove_suffix(kFenceSuffix.size());
    *fence = true;
  }
  return DecodeSegment(rest, key);
}

bool ParseIdempotencyTarget(std::string_view target, IdempotencyTarget* out) {
  if (target.substr(0, kIdempotencyPrefix.size()) != kIdempotencyPrefix) return false;
  std::string_view rest = target.substr(kIdempotencyPrefix.size());
  std::string_view query;
  bool has_query = false;
  if (size_t q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
    has_query = true;
  }
  const size_t slash = rest.find('/');
  if (slash == std::string_view::npos) return false;
  if (!DecodeSegment(rest.substr(0, slash), &out->route) ||
      !DecodeSegment(rest.substr(slash + 1), &out->key)) {
    return false;
  }
  out->scope.clear();
  if (!has_query) return true;
  // Exactly "scope=<value>": another parameter, or scope twice, would be a
  // guess at what the caller meant.
  if (query.substr(0, kScopeParam.size()) != kScopeParam) return false;
  std::string_view value = query.substr(kScopeParam.size());
  if (value.find('&') != std::string_view::npos) return false;
  return Decode(value, &out->scope);
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  // Every byte of the longer input is compared, so timing depends on the
  // lengths only.
  size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

bool BearerMatches(std::string_view authorization, std::string_view token) {
  if (token.empty() || authorization.size() <= kBearer.size()) return false;
  if (!boost::beast::iequals(authorization.substr(0, kBearer.size()), kBearer)) return false;
  return ConstantTimeEquals(authorization.substr(kBearer.size()), token);
}

std::string CheckAdminKey(std::string_view key) {
  if (key.size() > kMaxKeyBytes) {
    return "the key is " + std::to_string(key.size()) + " bytes; a key is at most " +
           std::to_string(kMaxKeyBytes) + " bytes";
  }
  return "";
}

namespace {

constexpr std::string_view kFenceShape = "the body must be {\"token\": N}";
constexpr std::string_view kMaxToken = "18446744073709551615";  // 2^64-1

// The value of a JSON number's text (RFC 8259 6, as the parser accepted it)
// when it is an integer from 0 to 2^64-1; otherwise nullopt and *why. The
// digits are read as written: a double would round 2^64-1 and its
// neighbours, and the store would then keep a token nobody sent.
std::optional<uint64_t> ExactUnsigned(std::string_view text, std::string* why) {
  const bool negative = !text.empty() && text.front() == '-';
  if (negative) text.remove_prefix(1);
  std::string digits;  // integer and fraction digits, without the point
  int64_t scale = 0;   // the value is digits * 10^scale
  size_t i = 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) digits.push_back(text[i]);
  if (i < text.size() && text[i] == '.') {
    for (++i; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
      digits.push_back(text[i]);
      --scale;
    }
  }
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    const bool minus = i < text.size() && text[i] == '-';
    if (i < text.size() && (text[i] == '-' || text[i] == '+')) ++i;
    // Beyond a million the exponent's exact value no longer matters: the
    // number is then either not an integer or far too large (the body is
    // at most 64 KiB of digits).
    constexpr int64_t kCap = 1'000'000;
    int64_t exponent = 0;
    for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
      exponent = std::min(kCap, exponent * 10 + (text[i] - '0'));
    }
    scale += minus ? -exponent : exponent;
  }
  digits.erase(0, std::min(digits.find_first_not_of('0'), digits.size()));
  if (digits.empty()) return 0;  // zero, whatever its sign or exponent
  if (negative) {
    *why = "\"token\" must not be negative";
    return std::nullopt;
  }
  while (scale < 0 && digits.back() == '0') {
    digits.pop_back();
    ++scale;
  }
  if (scale < 0) {
    *why = "\"token\" must be an integer, not " + std::string(text.substr(0, 40));
    return std::nullopt;
  }
  const auto length = static_cast<int64_t>(digits.size()) + scale;
  const auto max_length = static_cast<int64_t>(kMaxToken.size());
  if (length > max_length ||
      (length == max_length && digits + std::string(static_cast<size_t>(scale), '0') > kMaxToken)) {
    *why = "\"token\" is larger than " + std::string(kMaxToken);
    return std::nullopt;
  }
  digits.append(static_cast<size_t>(scale), '0');
  uint64_t value = 0;
  for (char c : digits) value = value * 10 + static_cast<uint64_t>(c - '0');
  return value;
}

// Reads a fence body as it is parsed, so that what nlohmann::json would
// hide is seen: a member given twice (its parser keeps the last one) and a
// number's text.
class FenceBodyReader final : public nlohmann::json_sax<nlohmann::json> {
 public:
  // The outcome, once sax_parse has returned `parsed`.
  FenceBody Finish(bool parsed) {
    if (!parsed) {
      if (result_.message.empty()) Fail("bad_request", std::string(kFenceShape) + ": " + syntax_);
      return std::move(result_);
    }
    if (!result_.token) Fail("bad_request", std::string(kFenceShape) + ": it has no \"token\"");
    return std::move(result_);
  }

  bool null() override { return Value("null"); }
  bool boolean(bool) override { return Value("a boolean"); }
  bool number_integer(number_integer_t value) override {
    if (!InTokenValue()) return Value("a number");
    // The parser's signed integers are the ones written with a minus sign.
    if (value == 0) return Token(0);
    return Fail("bad_token", "\"token\" must not be negative");
  }
  bool number_unsigned(number_unsigned_t value) override {
    if (!InTokenValue()) return Value("a number");
    return Token(value);
  }
  bool number_float(number_float_t, const string_t& text) override {
    if (!InTokenValue()) return Value("a number");
    std::string why;
    std::optional<uint64_t> value = ExactUnsigned(text, &why);
    if (!value) return Fail("bad_token", why);
    return Token(*value);
  }
  bool string(string_t&) override { return Value("a string"); }
  bool binary(binary_t&) override { return Value("binary data"); }
  bool start_object(std::size_t) override {
    if (depth_ == 0) {
      depth_ = 1;
      return true;
    }
    return Value("an object");
  }
  bool key(string_t& name) override {
    if (name != "token") {
      return Fail("bad_request", std::string(kFenceShape) + ": unknown member \"" +
                                     name.substr(0, 64) + "\" (a fence takes only \"token\")");
    }
    if (seen_token_) {
      return Fail("bad_request", std::string(kFenceShape) + ": \"token\" is given twice");
    }
    seen_token_ = true;
    return true;
  }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return Value("an array"); }
  bool end_array() override { return true; }
  bool parse_error(std::size_t position, const std::string& last_token,
                   const nlohmann::detail::exception& error) override {
    // 406: a number beyond a double's range, which is valid JSON.
    constexpr int kNumberOverflow = 406;
    if (error.id == kNumberOverflow && InTokenValue()) {
      if (!last_token.empty() && last_token.front() == '-') {
        return Fail("bad_token", "\"token\" must not be negative");
      }
      return Fail("bad_token", "\"token\" is larger than " + std::string(kMaxToken));
    }
    if (error.id == kNumberOverflow && depth_ == 0) return Value("a number");
    syntax_ = "it is not valid JSON (at byte " + std::to_string(position) + ")";
    return false;
  }

 private:
  // Inside the body's object, after "token": the token's value.
  bool InTokenValue() const { return depth_ == 1; }

  // A value that is not a number, as the body or as the token.
  bool Value(const char* what) {
    if (!InTokenValue()) {
      return Fail("bad_request", std::string(kFenceShape) + ", not " + what);
    }
    return Fail("bad_token", std::string("\"token\" must be a JSON number, not ") + what);
  }
  bool Token(uint64_t value) {
    result_.token = value;
    return true;
  }
  bool Fail(const char* code, std::string message) {
    result_.token.reset();
    result_.code = code;
    result_.message = std::move(message);
    return false;  // stops the parse
  }

  int depth_ = 0;  // 1 inside the body's object (anything deeper is refused)
  bool seen_token_ = false;
  std::string syntax_;
  FenceBody result_;
};

}  // namespace

FenceBody ParseFenceBody(std::string_view body) {
  FenceBodyReader reader;
  return reader.Finish(nlohmann::json::sax_parse(body, &reader));
}

}  // namespace fencegate::proxy
