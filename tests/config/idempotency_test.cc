// routes[i].idempotency (docs/contract.md, "Idempotency keys"): both forms,
// their defaults, every mistake with its line and field, and the refusal
// that stands until the feature is built, reported after every mistake.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "config/internal.h"
#include "test_util.h"

namespace fencegate::config {
namespace {

using std::chrono::hours;
using std::chrono::minutes;
using std::chrono::seconds;
using testing::FailsAt;
using testing::kUpstream;
using testing::MustLoad;

// Line 1 upstream, line 2 "routes:", line 3 the route, line 4
// "    idempotency: FIRST", then each of `more` on its own line (indented
// under idempotency when `more` is not empty).
std::string Route(std::string_view first, std::initializer_list<std::string_view> more = {}) {
  std::string yaml = std::string(kUpstream) + "routes:\n  - path_prefix: /objects/\n" +
                     "    idempotency: " + std::string(first) + "\n";
  for (std::string_view line : more) yaml += "      " + std::string(line) + "\n";
  return yaml;
}
// The long form: `idempotency:` on line 4, its fields from line 5.
std::string Mapping(std::initializer_list<std::string_view> fields) { return Route("", fields); }

// What routes[0].idempotency parses to; fails the current test on an error.
std::optional<IdempotencyConfig> Parsed(std::string_view yaml) {
  LoadResult result = LoadFromString(yaml, testing::kTestFile);
  if (const auto* error = std::get_if<ConfigError>(&result)) {
    ADD_FAILURE() << "unexpected error: " << error->message;
    return std::nullopt;
  }
  const Config& c = std::get<Config>(result);
  if (c.routes.empty()) {
    ADD_FAILURE() << "no route";
    return std::nullopt;
  }
  return c.routes[0].idempotency;
}

TEST(IdempotencyTest, OffAndAbsentAreOff) {
  Config off = MustLoad(Route("off"));
  ASSERT_EQ(off.routes.size(), 1u);
  EXPECT_EQ(off.routes[0].idempotency, std::nullopt);
  Config absent = MustLoad(std::string(kUpstream) + "routes:\n  - path_prefix: /objects/\n");
  ASSERT_EQ(absent.routes.size(), 1u);
  EXPECT_EQ(absent.routes[0].idempotency, std::nullopt);
}

TEST(IdempotencyTest, ShortFormIsTheWindowWithDefaults) {
  std::optional<IdempotencyConfig> idem = Parsed(Route("24h"));
  ASSERT_TRUE(idem.has_value());
  EXPECT_EQ(idem->window, hours(24));
  EXPECT_EQ(idem->header, "Idempotency-Key");
  EXPECT_FALSE(idem->required);
  EXPECT_EQ(idem->scope, "");
  EXPECT_EQ(idem->concurrent, IdempotencyConcurrency::kConflict);
  EXPECT_EQ(idem->max_response_bytes, 1048576u);
  EXPECT_EQ(idem->in_flight_timeout, seconds(60));
  EXPECT_EQ(idem->line, 4);
}

TEST(IdempotencyTest, InFlightTimeoutDefaultIsAtMostTheWindow) {
  std::optional<IdempotencyConfig> short_form = Parsed(Route("30s"));
  ASSERT_TRUE(short_form.has_value());
  EXPECT_EQ(short_form->in_flight_timeout, seconds(30));
  std::optional<IdempotencyConfig> long_form = Parsed(Mapping({"window: 45s"}));
  ASSERT_TRUE(long_form.has_value());
  EXPECT_EQ(long_form->in_flight_timeout, seconds(45));
}

TEST(IdempotencyTest, LongFormDefaults) {
  std::optional<IdempotencyConfig> idem = Parsed(Mapping({"window: 10m"}));
  ASSERT_TRUE(idem.has_value());
  IdempotencyConfig expected;
  expected.window = minutes(10);
  expected.line = 4;
  EXPECT_EQ(*idem, expected);
}

TEST(IdempotencyTest, LongFormEveryField) {
  std::optional<IdempotencyConfig> idem = Parsed(Mapping({
      "window: 1h30m",
      "header: X-Request-Key",
      "required: true",
      "scope: \"{header:Authorization}\"",
      "concurrent: wait",
      "max_response_bytes: 512KiB",
      "in_flight_timeout: 90s",
  }));
  ASSERT_TRUE(idem.has_value());
  EXPECT_EQ(idem->window, minutes(90));
  EXPECT_EQ(idem->header, "X-Request-Key");
  EXPECT_TRUE(idem->required);
  EXPECT_EQ(idem->scope, "{header:Authorization}");
  EXPECT_EQ(idem->concurrent, IdempotencyConcurrency::kWait);
  EXPECT_EQ(idem->max_response_bytes, 524288u);
  EXPECT_EQ(idem->in_flight_timeout, seconds(90));
  EXPECT_EQ(ToString(idem->concurrent), "wait");
  EXPECT_EQ(ToString(IdempotencyConcurrency::kConflict), "conflict");
}

TEST(IdempotencyTest, FlowMappingIsTheLongForm) {
  std::optional<IdempotencyConfig> idem = Parsed(Route("{window: 24h, required: true}"));
  ASSERT_TRUE(idem.has_value());
  EXPECT_EQ(idem->window, hours(24));
  EXPECT_TRUE(idem->required);
}

// Both forms load as they are, on any route of the file.
TEST(IdempotencyTest, BothFormsLoadOnTheirRoute) {
  std::string yaml = std::string(kUpstream) +
                     "routes:\n"
                     "  - {path_prefix: /a/, idempotency: off}\n"
                     "  - path_prefix: /b/\n"
                     "    idempotency:\n"
                     "      window: 1h\n"
                     "      concurrent: wait\n";
  Config c = MustLoad(yaml);
  ASSERT_EQ(c.routes.size(), 2u);
  EXPECT_FALSE(c.routes[0].idempotency.has_value());
  ASSERT_TRUE(c.routes[1].idempotency.has_value());
  EXPECT_EQ(c.routes[1].idempotency->window, hours(1));
  EXPECT_EQ(c.routes[1].idempotency->concurrent, IdempotencyConcurrency::kWait);
}

TEST(IdempotencyTest, WrongType) {
  EXPECT_TRUE(FailsAt(Route("[24h]"), 4, "routes[0].idempotency",
                      "is a list (expected off, a window such as 24h, or a mapping with window"));
  EXPECT_TRUE(FailsAt(Route(""), 4, "routes[0].idempotency", "is empty (no value)"));
  EXPECT_TRUE(FailsAt(Route("\"\""), 4, "routes[0].idempotency", "is empty"));
  EXPECT_TRUE(FailsAt(Route("24"), 4, "routes[0].idempotency",
                      "'24' is neither off nor a positive duration"));
  EXPECT_TRUE(FailsAt(Route("0s"), 4, "routes[0].idempotency",
                      "'0s' is neither off nor a positive duration"));
  EXPECT_TRUE(FailsAt(Route("no"), 4, "routes[0].idempotency", "'no'"));
  EXPECT_TRUE(FailsAt(Route("true"), 4, "routes[0].idempotency", "'true'"));
}

TEST(IdempotencyTest, MissingWindow) {
  EXPECT_TRUE(FailsAt(Mapping({"header: Idempotency-Key"}), 4, "routes[0].idempotency.window",
                      "is missing (expected how long a finished request is remembered"));
  EXPECT_TRUE(FailsAt(Route("{}"), 4, "routes[0].idempotency.window", "is missing"));
}

TEST(IdempotencyTest, WindowMustBePositiveAndAtMostAYear) {
  EXPECT_TRUE(FailsAt(Mapping({"window: 0s"}), 5, "routes[0].idempotency.window", "'0s' is zero"));
  EXPECT_TRUE(FailsAt(Mapping({"window: 24"}), 5, "routes[0].idempotency.window",
                      "'24' is not a duration"));
  EXPECT_TRUE(FailsAt(Mapping({"window: 8761h"}), 5, "routes[0].idempotency.window",
                      "'8761h' is longer than 8760h (365 days)"));
  EXPECT_TRUE(FailsAt(Route("24000h"), 4, "routes[0].idempotency",
                      "'24000h' is longer than 8760h (365 days)"));
  std::optional<IdempotencyConfig> year = Parsed(Route("8760h"));
  ASSERT_TRUE(year.has_value());
  EXPECT_EQ(year->window, hours(8760));
}

TEST(IdempotencyTest, HeaderMustBeAToken) {
  EXPECT_TRUE(FailsAt(Mapping({"window: 24h", "header: \"Idempotency Key\""}), 6,
                      "routes[0].idempotency.header",
                      "'Idempotency Key' is not a valid header name (expected an end-to-end HTTP "
                      "header name such as Idempotency-Key)"));
  EXPECT_TRUE(FailsAt(Mapping({"window: 24h", "header: \"Key:\""}), 6,
                      "routes[0].idempotency.header", "is not a valid header name"));
  EXPECT_TRUE(FailsAt(Mapping({"window: 24h", "header: \"\""}), 6, "routes[0].idempotency.header",
                      "is empty"));
  EXPECT_TRUE(FailsAt(Mapping({"window: 24h", "header: [A, B]"}), 6,
                      "routes[0].idempotency.header", "is a list"));
}

TEST(IdempotencyTest, HeaderMustBeEndToEnd) {
  EXPECT_TRUE(FailsAt(Mapping({"window: 24h", "header: Connection"}), 6,
                      "routes[0].idempotency.header",
                      "'Connection' belongs to one connection (hop-by-hop)"));
  EXPECT_TRUE(FailsAt(Mapping({"window: 24h", "header: keep-alive"}), 6,
                      "routes[0].idempotency.header", "hop-by-hop"));
  EXPECT_TRUE(FailsAt(Mapping({"window: 24h", "header: content-length"}), 6,
                      "routes[0].idempotency.header", "'content-length' frames the message"));
  EXPECT_TRUE(FailsAt(Mapping({"window: 24h", "header: Transfer-Encoding"}), 6,
                      "routes[0].idempotency.header", "frames the message"));
  EXPECT_TRUE(FailsAt(Mapping({"window: 24h", "header: HOST"}), 6,
                      "routes[0].idempotency.header", "'HOST' names the target"));
  EXPECT_TRUE(FailsAt(Mapping({"window: 24h", "header: Expect"}), 6,
                      "routes[0].idempotency.header", "answered by fencegate itself"));
}

TEST(IdempotencyTest, RequiredMustBeABool) {
  EXPECT_TRUE(FailsAt(Mapping({"window: 24h", "required: yes"}), 6,
                      "routes[0].idempotency.required", "'yes' is not a boolean"));
}

// The scope is a key template, validated as the route's key is: with the
// route's regex groups, wherever path_regex stands in the route.
TEST(IdempotencyTest, ScopeIsAKeyTemplate) {
  EXPECT_TRUE(FailsAt(Mapping({"window: 24h", "scope: \"{header:}\""}), 6,
                      "routes[0].idempotency.scope",
                      "'{header:}' has an invalid header name in {header:} (expected literal "
                      "text with {path}"));
  EXPECT_TRUE(FailsAt(Mapping({"window: 24h", "scope: \"{tenant\""}), 6,
                      "routes[0].idempotency.scope", "has an unbalanced '{' at offset 0"));
  EXPECT_TRUE(FailsAt(Mapping({"window: 24h", "scope: \"{1}\""}), 6,
                      "routes[0].idempotency.scope", "captures need path_regex"));
  EXPECT_TRUE(FailsAt(Mapping({"window: 24h", "scope: [a]"}), 6, "routes[0].idempotency.scope",
                      "is a list"));

  std::string regex_after = std::string(kUpstream) +
                            "routes:\n"
                            "  - idempotency: {window: 24h, scope: \"tenant-{1}\"}\n"
                            "    path_regex: \"^/t/([^/]+)/\"\n";
  std::optional<IdempotencyConfig> idem = Parsed(regex_after);
  ASSERT_TRUE(idem.has_value());
  EXPECT_EQ(idem->scope, "tenant-{1}");
  std::string too_many = std::string(kUpstream) +
                         "routes:\n"
                         "  - path_regex: \"^/t/([^/]+)/\"\n"
                         "    idempotency:\n"
                         "      window: 24h\n"
                         "      scope: \"{2}\"\n";
  EXPECT_TRUE(FailsAt(too_many, 6, "routes[0].idempotency.scope",
                      "uses {2} but path_regex has only 1 capture group(s)"));
  // "" is the default: the key is not scoped.
  std::optional<IdempotencyConfig> unscoped = Parsed(Mapping({"window: 24h", "scope: \"\""}));
  ASSERT_TRUE(unscoped.has_value());
  EXPECT_EQ(unscoped->scope, "");
}

TEST(IdempotencyTest, ConcurrentIsConflictOrWait) {
  EXPECT_TRUE(FailsAt(Mapping({"window: 24h", "concurrent: queue"}), 6,
                      "routes[0].idempotency.concurrent",
                      "'queue' is not allowed (expected conflict or wait)"));
  EXPECT_TRUE(FailsAt(Mapping({"window: 24h", "concurrent: Wait"}), 6,
                      "routes[0].idempotency.concurrent", "'Wait' is not allowed"));
}

TEST(IdempotencyTest, MaxResponseBytesIsABoundedSize) {
  EXPECT_TRUE(FailsAt(Mapping({"window: 24h", "max_response_bytes: 0"}), 6,
                      "routes[0].idempotency.max_response_bytes",
                      "'0' is less than 1 (expected a size such as 65536, 512KiB or 1MiB, from 1 "
                      "to 64MiB)"));
  EXPECT_TRUE(FailsAt(Mapping({"window: 24h", "max_response_bytes: 0MiB"}), 6,
                      "routes[0].idempotency.max_response_bytes", "'0MiB' is less than 1"));
  EXPECT_TRUE(FailsAt(Mapping({"window: 24h", "max_response_bytes: 65MiB"}), 6,
                      "routes[0].idempotency.max_response_bytes", "'65MiB' is more than 64MiB"));
  EXPECT_TRUE(FailsAt(Mapping({"window: 24h", "max_response_bytes: 67108865"}), 6,
                      "routes[0].idempotency.max_response_bytes", "is more than 64MiB"));
  EXPECT_TRUE(FailsAt(Mapping({"window: 24h", "max_response_bytes: 99999999999999999999"}), 6,
                      "routes[0].idempotency.max_response_bytes", "is not a size"));
  EXPECT_TRUE(FailsAt(Mapping({"window: 24h", "max_response_bytes: 1MB"}), 6,
                      "routes[0].idempotency.max_response_bytes", "'1MB' is not a size"));
  std::optional<IdempotencyConfig> most = Parsed(Mapping({"window: 24h", "max_response_bytes: 64MiB"}));
  ASSERT_TRUE(most.has_value());
  EXPECT_EQ(most->max_response_bytes, 67108864u);
  std::optional<IdempotencyConfig> least = Parsed(Mapping({"window: 24h", "max_response_bytes: 1"}));
  ASSERT_TRUE(least.has_value());
  EXPECT_EQ(least->max_response_bytes, 1u);
}

TEST(IdempotencyTest, InFlightTimeoutIsPositiveAndWithinTheWindow) {
  EXPECT_TRUE(FailsAt(Mapping({"window: 30s", "in_flight_timeout: 60s"}), 6,
                      "routes[0].idempotency.in_flight_timeout",
                      "'60s' is longer than the window, '30s' on line 5 (expected a duration "
                      "of at most the window)"));
  // Wherever the window stands in the mapping.
  EXPECT_TRUE(FailsAt(Mapping({"in_flight_timeout: 2m", "window: 1m"}), 5,
                      "routes[0].idempotency.in_flight_timeout",
                      "'2m' is longer than the window, '1m' on line 6"));
  EXPECT_TRUE(FailsAt(Mapping({"window: 30s", "in_flight_timeout: 0s"}), 6,
                      "routes[0].idempotency.in_flight_timeout", "'0s' is zero"));
  std::optional<IdempotencyConfig> equal =
      Parsed(Mapping({"window: 30s", "in_flight_timeout: 30s"}));
  ASSERT_TRUE(equal.has_value());
  EXPECT_EQ(equal->in_flight_timeout, seconds(30));
}

TEST(IdempotencyTest, UnknownAndDuplicateFields) {
  EXPECT_TRUE(FailsAt(Mapping({"window: 24h", "windw: 1h"}), 6, "routes[0].idempotency.windw",
                      "unknown key; did you mean 'window'? (expected one of window, header, "
                      "required, scope, concurrent, "
                      "max_response_bytes, in_flight_timeout)"));
  EXPECT_TRUE(FailsAt(Mapping({"window: 24h", "window: 1h"}), 6, "routes[0].idempotency.window",
                      "duplicate key"));
}

}  // namespace
}  // namespace fencegate::config
