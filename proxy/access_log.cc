#include "proxy/access_log.h"

#include <spdlog/fmt/fmt.h>

#include <iterator>

#include "net/replies.h"

namespace fencegate::proxy {

namespace {

double Millis(RequestRecord::Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

}  // namespace

std::string Rfc3339Millis(std::chrono::system_clock::time_point wall) {
  using namespace std::chrono;
  const auto ms = floor<milliseconds>(wall);
  const auto day = floor<days>(ms);
  const year_month_day ymd{day};
  const hh_mm_ss<milliseconds> t{ms - day};
  // Digits by hand: fmt parses a format string at every call, and this runs
  // once a request.
  std::string out = "0000-00-00T00:00:00.000Z";
  auto put = [&out](size_t at, size_t width, unsigned value) {
    for (size_t i = width; i-- > 0; value /= 10) out[at + i] = static_cast<char>('0' + value % 10);
  };
  put(0, 4, static_cast<unsigned>(static_cast<int>(ymd.year())));
  put(5, 2, static_cast<unsigned>(ymd.month()));
  put(8, 2, static_cast<unsigned>(ymd.day()));
  put(11, 2, static_cast<unsigned>(t.hours().count()));
  put(14, 2, static_cast<unsigned>(t.minutes().count()));
  put(17, 2, static_cast<unsigned>(t.seconds().count()));
  put(20, 3, static_cast<unsigned>(t.subseconds().count()));
  return out;
}

// The line is written by hand rather than with nlohmann::json, which
// builds a tree of allocated nodes and walks it again to dump it: about
// 39,000 instructions a line, twice what fencegate spends on a whole GET
// (docs/performance.md, "The access log").
std::string AccessLogLine(const RequestRecord& record, std::string_view request_id,
                          std::string_view client, std::string_view method,
                          std::string_view path, const WriteIntent& intent,
                          RequestRecord::Clock::time_point now,
                          std::chrono::system_clock::time_point wall) {
  std::string line;
  line.reserve(320 + path.size() + intent.key.size());
  auto text = [&](std::string_view name, std::string_view value) {
    line += ",\"";
    line += name;
    line += "\":";
    AppendJsonString(line, value);
  };
  line += "{\"ts\":\"";
  line += Rfc3339Millis(wall);
  line += '"';
  text("request_id", request_id);
  text("client", client);
  text("method", method);
  text("path", path);
  text("route", intent.route ? std::string_view(intent.route->name) : std::string_view());
  if (!intent.key.empty()) text("key", intent.key);
  auto number = [&](std::string_view name, uint64_t value) {
    line += ",\"";
    line += name;
    line += "\":";
    const fmt::format_int digits(value);
    line.append(digits.data(), digits.size());
  };
  if (intent.kind == WriteIntent::Kind::kFence) number("token", intent.token);
  if (intent.idempotency.on()) text("idempotency_key", intent.idempotency.client_key);
  text("outcome", record.outcome);
  number("status", record.status);
  number("bytes_in", record.bytes_in);
  number("bytes_out", record.bytes_out);
  if (record.upstream_started != RequestRecord::Clock::time_point{} &&
      record.upstream_ended >= record.upstream_started) {
    fmt::format_to(std::back_inserter(line), ",\"upstream_ms\":{:.3f}",
                   Millis(record.upstream_ended - record.upstream_started));
  }
  fmt::format_to(std::back_inserter(line), ",\"total_ms\":{:.3f}", Millis(now - record.started));
  if (!intent.shadow_violation.empty()) text("shadow_violation", intent.shadow_violation);
  line += '}';
  return line;
}

namespace {

// The length of the well-formed UTF-8 sequence at the start of `s`
// (Unicode 15, table 3-7), or 0 when there is none.
size_t Utf8SequenceLength(std::string_view s) {
  auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  auto in = [&](size_t i, unsigned lo, unsigned hi) {
    return i < s.size() && byte(i) >= lo && byte(i) <= hi;
  };
  const unsigned b0 = byte(0);
  if (b0 < 0x80) return 1;
  if (b0 >= 0xC2 && b0 <= 0xDF) return in(1, 0x80, 0xBF) ? 2 : 0;
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    const unsigned lo = b0 == 0xE0 ? 0xA0 : 0x80;
    const unsigned hi = b0 == 0xED ? 0x9F : 0xBF;
    return in(1, lo, hi) && in(2, 0x80, 0xBF) ? 3 : 0;
  }
  if (b0 >= 0xF0 && b0 <= 0xF4) {
    const unsigned lo = b0 == 0xF0 ? 0x90 : 0x80;
    const unsigned hi = b0 == 0xF4 ? 0x8F : 0xBF;
    return in(1, lo, hi) && in(2, 0x80, 0xBF) && in(3, 0x80, 0xBF) ? 4 : 0;
  }
  return 0;
}

}  // namespace

void AppendJsonString(std::string& out, std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += '"';
  size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += kHex[c >> 4];
          out += kHex[c & 0xF];
        } else if (size_t n = Utf8SequenceLength(text.substr(i)); n > 0) {
          out.append(text.substr(i, n));
          i += n;
          continue;
        } else {
          out += "\xEF\xBF\xBD";  // U+FFFD for a byte that begins no UTF-8 character
        }
    }
    ++i;
  }
  out += '"';
}

}  // namespace fencegate::proxy
