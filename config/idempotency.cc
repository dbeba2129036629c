// A route's `idempotency:` field: the short form (a window) and the
// mapping, their defaults and bounds, and the refusal of the planned
// feature.

#include "config/idempotency.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include <boost/algorithm/string/predicate.hpp>

#include "config/internal.h"
#include "config/readers.h"

namespace fencegate::config::internal {
namespace {

constexpr std::string_view kExpected =
    "off, a window such as 24h, or a mapping with window and optionally header, required, "
    "scope, concurrent, max_response_bytes, in_flight_timeout";
constexpr std::string_view kWindowExpected = "a positive duration of at most 8760h, such as 24h";
constexpr std::string_view kHeaderExpected =
    "an end-to-end HTTP header name such as Idempotency-Key";

// A window is how long a retry may come back for a request: minutes to
// days (Stripe keeps keys for 24 hours). Every write's stored response
// lives that long, so the store grows with traffic times window; a year
// bounds that, and refuses a unit typo (24000h for 24h) that would keep
// every response for ever.
constexpr Duration kMaxWindow = std::chrono::hours(365 * 24);
// The response kept for replay is gathered in memory while it streams to
// the client, then written as one store record. 64 MiB bounds what one
// request pins in memory and in a store write (the request side,
// limits.max_body_bytes, defaults to 10 MiB); a larger response is not the
// kind of write a retry replays.
constexpr uint64_t kMaxResponseBytes = uint64_t{64} << 20;
// in_flight_timeout's default, shortened to the window when that is less.
constexpr Duration kDefaultInFlight{60000};

// Headers that cannot carry the key: fencegate consumes or rewrites them
// for the connection or the framing, so the backend and a replay would not
// see what the client sent.
struct Refused {
  std::string_view name;
  std::string_view why;
};
constexpr std::string_view kHopByHop = "belongs to one connection (hop-by-hop)";
constexpr Refused kRefusedHeaders[] = {
    {"Connection", kHopByHop},
    {"Keep-Alive", kHopByHop},
    {"Proxy-Connection", kHopByHop},
    {"TE", kHopByHop},
    {"Trailer", kHopByHop},
    {"Upgrade", kHopByHop},
    {"Proxy-Authorization", kHopByHop},
    {"Proxy-Authenticate", kHopByHop},
    {"Content-Length", "frames the message, which fencegate re-frames"},
    {"Transfer-Encoding", "frames the message, which fencegate re-frames"},
    {"Host", "names the target, not a request"},
    {"Expect", "is answered by fencegate itself (100-continue)"},
};

// Sets *out to `window`, a positive duration read from `f`, within bounds.
bool BoundWindow(YamlReader& r, const Field& f, Duration window, Duration* out) {
  if (window > kMaxWindow) {
    return r.Fail(f, "'" + f.node.Scalar() + "' is longer than 8760h (365 days)", kWindowExpected);
  }
  *out = window;
  return true;
}

bool ReadHeader(YamlReader& r, const Field& f, std::string* out) {
  std::string name;
  if (!r.NonEmptyString(f, kHeaderExpected, &name)) return false;
  if (!IsHttpToken(name)) {
    return r.Fail(f, "'" + name + "' is not a valid header name", kHeaderExpected);
  }
  for (const Refused& refused : kRefusedHeaders) {
    if (boost::algorithm::iequals(name, refused.name)) {
      return r.Fail(f, "'" + name + "' " + std::string(refused.why), kHeaderExpected);
    }
  }
  *out = std::move(name);
  return true;
}

// The mapping form. A field left out keeps its default.
bool ReadMapping(YamlReader& r, const Field& f, IdempotencyConfig* idem,
                 std::optional<Field>* scope_field) {
  std::optional<Field> window_field;
  std::optional<Field> in_flight_field;
  bool ok = r.Map(f, Keys{
      {"window", [&](const Field& v) {
         window_field = v;
         Duration window{0};
         return r.PositiveDuration(v, &window) && BoundWindow(r, v, window, &idem->window);
       }},
      {"header", [&](const Field& v) { return ReadHeader(r, v, &idem->header); }},
      {"required", [&](const Field& v) { return r.Bool(v, &idem->required); }},
      {"scope", [&](const Field& v) {
         *scope_field = v;
         return r.String(v, &idem->scope);
       }},
      {"concurrent", [&](const Field& v) {
         std::string choice;
         if (!r.Choice(v, {"conflict", "wait"}, &choice)) return false;
         idem->concurrent = choice == "wait" ? IdempotencyConcurrency::kWait
                                             : IdempotencyConcurrency::kConflict;
         return true;
       }},
      {"max_response_bytes", [&](const Field& v) {
         return r.Size(v, 1, kMaxResponseBytes, &idem->max_response_bytes);
       }},
      {"in_flight_timeout", [&](const Field& v) {
         in_flight_field = v;
         return r.PositiveDuration(v, &idem->in_flight_timeout);
       }},
  });
  if (!ok) return false;
  if (!window_field) {
    return r.Fail(f.Child(f.node, "window", f.line), "is missing",
                  "how long a finished request is remembered, e.g. window: 24h");
  }
  if (!in_flight_field) {
    idem->in_flight_timeout = std::min(kDefaultInFlight, idem->window);
  } else if (idem->in_flight_timeout > idem->window) {
    // A reservation is the record of a request still running; it cannot
    // outlive the record of the finished request, which the window bounds.
    return r.Fail(*in_flight_field,
                  "'" + in_flight_field->node.Scalar() + "' is longer than the window, '" +
                      window_field->node.Scalar() + "' on line " +
                      std::to_string(window_field->line),
                  "a duration of at most the window");
  }
  return true;
}

}  // namespace

bool ReadIdempotency(YamlReader& r, const Field& f, std::optional<IdempotencyConfig>* out,
                     std::optional<Field>* scope_field) {
  IdempotencyConfig idem;
  idem.line = f.line;
  if (f.node.IsMap()) {
    if (!ReadMapping(r, f, &idem, scope_field)) return false;
    *out = std::move(idem);
    return true;
  }
  std::string text;
  if (!r.NonEmptyString(f, kExpected, &text)) return false;
  if (text == "off") {
    *out = std::nullopt;
    return true;
  }
  std::optional<Duration> window = ParseDuration(text);
  if (!window || window->count() <= 0) {
    return r.Fail(f, "'" + text + "' is neither off nor a positive duration", kExpected);
  }
  if (!BoundWindow(r, f, *window, &idem.window)) return false;
  idem.in_flight_timeout = std::min(kDefaultInFlight, idem.window);
  *out = std::move(idem);
  return true;
}

}  // namespace fencegate::config::internal
