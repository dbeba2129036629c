// Scalar value parsers: durations, sizes, listen endpoints, HTTP tokens and
// key templates. Pure functions, no YAML; Load() builds on them.

#include <arpa/inet.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/config.h"
#include "config/internal.h"

namespace fencegate::config {
namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsLower(char c) { return c >= 'a' && c <= 'z'; }

// The longest accepted duration: what std::chrono::nanoseconds can hold
// (about 292 years), so callers may convert any parsed value safely.
constexpr int64_t kMaxDurationMs = std::numeric_limits<int64_t>::max() / 1'000'000;

// Milliseconds per unit and the unit's rank (units must appear largest first).
struct Unit {
  std::string_view name;
  int64_t ms;
  int rank;
};
constexpr Unit kUnits[] = {
    {"h", 3'600'000, 3},
    {"m", 60'000, 2},
    {"s", 1'000, 1},
    {"ms", 1, 0},
};

const Unit* FindUnit(std::string_view name) {
  for (const Unit& unit : kUnits) {
    if (unit.name == name) return &unit;
  }
  return nullptr;
}

// Parses 1..5 digits as a port number.
std::optional<uint16_t> ParsePort(std::string_view text) {
  if (text.empty() || text.size() > 5) return std::nullopt;
  unsigned value = 0;
  for (char c : text) {
    if (!IsDigit(c)) return std::nullopt;
    value = value * 10 + static_cast<unsigned>(c - '0');
  }
  if (value > 65535) return std::nullopt;
  return static_cast<uint16_t>(value);
}

bool IsIpv4Literal(const std::string& host) {
  in_addr addr{};
  return inet_pton(AF_INET, host.c_str(), &addr) == 1;
}

bool IsIpv6Literal(const std::string& host) {
  in6_addr addr{};
  return inet_pton(AF_INET6, host.c_str(), &addr) == 1;
}

bool IsControl(char c) {
  auto byte = static_cast<unsigned char>(c);
  return byte < 0x20 || byte == 0x7f;
}

}  // namespace

std::string Endpoint::ToString() const {
  std::string out;
  if (host.find(':') != std::string::npos) {
    out = "[" + host + "]";
  } else {
    out = host;
  }
  out += ":" + std::to_string(port);
  return out;
}

std::string_view ToString(RouteMode mode) {
  switch (mode) {
    case RouteMode::kEnforce:
      return "enforce";
    case RouteMode::kShadow:
      return "shadow";
    case RouteMode::kOff:
      return "off";
  }
  return "?";
}

std::string_view ToString(RouteNesting nesting) {
  switch (nesting) {
    case RouteNesting::kPerKey:
      return "per_key";
    case RouteNesting::kShared:
      return "shared";
    case RouteNesting::kOff:
      return "off";
  }
  return "?";
}

std::string_view ToString(IdempotencyConcurrency concurrent) {
  switch (concurrent) {
    case IdempotencyConcurrency::kConflict:
      return "conflict";
    case IdempotencyConcurrency::kWait:
      return "wait";
  }
  return "?";
}

std::string_view ToString(TlsVersion version) {
  switch (version) {
    case TlsVersion::kTls12:
      return "1.2";
    case TlsVersion::kTls13:
      return "1.3";
  }
  return "?";
}

std::string_view ToString(Durability durability) {
  switch (durability) {
    case Durability::kSync:
      return "sync";
    case Durability::kAsync:
      return "async";
  }
  return "?";
}

std::optional<Duration> ParseDuration(std::string_view text) {
  if (text.empty()) return std::nullopt;
  int64_t total = 0;
  int previous_rank = 4;  // larger than any unit
  size_t i = 0;
  while (i < text.size()) {
    size_t digits_begin = i;
    while (i < text.size() && IsDigit(text[i])) ++i;
    if (i == digits_begin) return std::nullopt;  // sign, '.', space, letter first
    int64_t amount = 0;
    auto [ptr, ec] = std::from_chars(text.data() + digits_begin, text.data() + i, amount);
    if (ec != std::errc() || ptr != text.data() + i) return std::nullopt;  // overflow

    size_t unit_begin = i;
    while (i < text.size() && IsLower(text[i])) ++i;
    const Unit* unit = FindUnit(text.substr(unit_begin, i - unit_begin));
    if (unit == nullptr) return std::nullopt;              // missing or unknown unit
    if (unit->rank >= previous_rank) return std::nullopt;  // "30m1h", "1s1s"
    previous_rank = unit->rank;

    if (amount > (kMaxDurationMs - total) / unit->ms) return std::nullopt;
    total += amount * unit->ms;
  }
  return Duration(total);
}

std::optional<Endpoint> ParseEndpoint(std::string_view text) {
  Endpoint endpoint;
  std::string_view port_text;
  if (!text.empty() && text.front() == '[') {
    size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return std::nullopt;
    }
    endpoint.host = std::string(text.substr(1, close - 1));
    if (!IsIpv6Literal(endpoint.host)) return std::nullopt;
    port_text = text.substr(close + 2);
  } else {
    size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return std::nullopt;
    endpoint.host = std::string(text.substr(0, colon));
    if (endpoint.host != "localhost" && !IsIpv4Literal(endpoint.host)) return std::nullopt;
    port_text = text.substr(colon + 1);
  }
  std::optional<uint16_t> port = ParsePort(port_text);
  if (!port) return std::nullopt;
  endpoint.port = *port;
  return endpoint;
}

namespace internal {

size_t EditDistance(std::string_view a, std::string_view b) {
  // Three rows of the dynamic programme: the one before the previous (for
  // a swap), the previous and the current.
  std::vector<size_t> before(b.size() + 1);
  std::vector<size_t> previous(b.size() + 1);
  std::vector<size_t> current(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) previous[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t substitution = previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, substitution});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        current[j] = std::min(current[j], before[j - 2] + 1);
      }
    }
    std::swap(before, previous);
    std::swap(previous, current);
  }
  return previous[b.size()];
}

bool IsHttpToken(std::string_view text) {
  static constexpr std::string_view kSymbols = "!#$%&'*+-.^_`|~";
  if (text.empty()) return false;
  for (char c : text) {
    bool ok = IsDigit(c) || IsLower(c) || (c >= 'A' && c <= 'Z') ||
              kSymbols.find(c) != std::string_view::npos;
    if (!ok) return false;
  }
  return true;
}

namespace {

struct SizeUnit {
  std::string_view name;
  uint64_t bytes;
};
// Largest first, for FormatSize.
constexpr SizeUnit kSizeUnits[] = {
    {"GiB", uint64_t{1} << 30},
    {"MiB", uint64_t{1} << 20},
    {"KiB", uint64_t{1} << 10},
};

}  // namespace

std::optional<uint64_t> ParseSize(std::string_view text) {
  size_t digits = 0;
  while (digits < text.size() && IsDigit(text[digits])) ++digits;
  if (digits == 0) return std::nullopt;
  uint64_t amount = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + digits, amount);
  if (ec != std::errc() || ptr != text.data() + digits) return std::nullopt;  // overflow
  std::string_view suffix = text.substr(digits);
  if (suffix.empty()) return amount;
  for (const SizeUnit& unit : kSizeUnits) {
    if (suffix != unit.name) continue;
    if (amount > std::numeric_limits<uint64_t>::max() / unit.bytes) return std::nullopt;
    return amount * unit.bytes;
  }
  return std::nullopt;
}

std::string FormatSize(uint64_t bytes) {
  for (const SizeUnit& unit : kSizeUnits) {
    if (bytes != 0 && bytes % unit.bytes == 0) {
      return std::to_string(bytes / unit.bytes) + std::string(unit.name);
    }
  }
  return std::to_string(bytes);
}

std::string ValidateKeyTemplate(std::string_view key, unsigned capture_count, bool has_regex) {
  if (key.empty()) return "is empty";
  for (size_t i = 0; i < key.size(); ++i) {
    char c = key[i];
    if (c == '}') return "has an unbalanced '}' at offset " + std::to_string(i);
    if (IsControl(c)) return "contains a control character at offset " + std::to_string(i);
    if (c != '{') continue;

    size_t close = key.find_first_of("{}", i + 1);
    if (close == std::string_view::npos || key[close] == '{') {
      return "has an unbalanced '{' at offset " + std::to_string(i);
    }
    std::string_view inner = key.substr(i + 1, close - i - 1);
    std::string placeholder = "{" + std::string(inner) + "}";
    if (inner == "path") {
      // The canonical path.
    } else if (inner.size() == 1 && inner[0] >= '1' && inner[0] <= '9') {
      unsigned index = static_cast<unsigned>(inner[0] - '0');
      if (!has_regex) {
        return "uses " + placeholder + " but the route has path_prefix; captures need path_regex";
      }
      if (index > capture_count) {
        return "uses " + placeholder + " but path_regex has only " + std::to_string(capture_count) +
               " capture group(s)";
      }
    } else if (inner.substr(0, 7) == "header:") {
      if (!IsHttpToken(inner.substr(7))) {
        return "has an invalid header name in " + placeholder;
      }
    } else {
      return "has an unknown placeholder " + placeholder;
    }
    i = close;
  }
  return "";
}

}  // namespace internal
}  // namespace fencegate::config
