// The access log line (proxy/access_log.h): the fields every line has, the
// ones only some requests have, and bytes a client chose.

#include "proxy/access_log.h"

#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <random>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>

#include "fence/router.h"

namespace fencegate::proxy {
namespace {

using Clock = RequestRecord::Clock;
using std::chrono::milliseconds;

// 2026-12-06T13:10:00.123Z
const std::chrono::system_clock::time_point kWall{milliseconds(1796562600123)};

nlohmann::json Parse(const std::string& line) {
  auto json = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  EXPECT_TRUE(json.is_object()) << line;
  return json;
}

TEST(AccessLog, AFencedWriteThatReachedTheBackendHasEveryField) {
  Route route;
  route.name = "objects";
  WriteIntent intent;
  intent.kind = WriteIntent::Kind::kFence;
  intent.route = &route;
  intent.key = "/objects/a";
  intent.token = 7;
  RequestRecord record;
  record.outcome = "forwarded";
  record.status = 201;
  record.bytes_in = 5;
  record.bytes_out = 2;
  const Clock::time_point t0 = Clock::now();
  record.started = t0;
  record.upstream_started = t0 + milliseconds(1);
  record.upstream_ended = t0 + milliseconds(3);

  nlohmann::json line = Parse(AccessLogLine(record, "req-1", "127.0.0.1", "PUT", "/objects/a",
                                            intent, t0 + milliseconds(4), kWall));
  EXPECT_EQ(line["request_id"], "req-1");
  EXPECT_EQ(line["client"], "127.0.0.1");
  EXPECT_EQ(line["method"], "PUT");
  EXPECT_EQ(line["path"], "/objects/a");
  EXPECT_EQ(line["route"], "objects");
  EXPECT_EQ(line["outcome"], "forwarded");
  EXPECT_EQ(line["status"], 201);
  EXPECT_EQ(line["bytes_in"], 5);
  EXPECT_EQ(line["bytes_out"], 2);
  EXPECT_EQ(line["key"], "/objects/a");
  EXPECT_EQ(line["token"], 7);
  EXPECT_DOUBLE_EQ(line["total_ms"].get<double>(), 4.0);
  EXPECT_DOUBLE_EQ(line["upstream_ms"].get<double>(), 2.0);
  EXPECT_FALSE(line.contains("shadow_violation"));
}

TEST(AccessLog, ARequestThatNeverReachedTheBackendHasNoUpstreamTime) {
  WriteIntent intent;  // passed through, no route
  RequestRecord record;
  record.outcome = "bad_request";
  record.status = 400;
  const Clock::time_point t0 = Clock::now();
  record.started = t0;

  nlohmann::json line =
      Parse(AccessLogLine(record, "req-2", "::1", "GET", "/a", intent, t0 + milliseconds(1), kWall));
  EXPECT_EQ(line["route"], "");
  EXPECT_FALSE(line.contains("key"));
  EXPECT_FALSE(line.contains("token"));
  EXPECT_FALSE(line.contains("upstream_ms"));

  // Started and not yet ended (the client went away meanwhile): no time.
  record.upstream_started = t0;
  record.upstream_ended = Clock::time_point{};
  line = Parse(AccessLogLine(record, "req-2", "::1", "GET", "/a", intent, t0, kWall));
  EXPECT_FALSE(line.contains("upstream_ms"));
}

TEST(AccessLog, ShadowViolationAndBytesThatAreNotUtf8) {
  WriteIntent intent;
  intent.key = "t\xFF:/objects/a";  // from a header: any bytes
  intent.shadow_violation = "stale";
  RequestRecord record;
  record.started = Clock::now();

  nlohmann::json line = Parse(AccessLogLine(record, "req-3", "10.0.0.1", "PUT", "/objects/a",
                                            intent, record.started, kWall));
  EXPECT_EQ(line["key"], "t\xEF\xBF\xBD:/objects/a");  // U+FFFD for the bad byte
  EXPECT_EQ(line["shadow_violation"], "stale");
  EXPECT_FALSE(line.contains("idempotency_key"));
}

TEST(AccessLog, AnIdempotentRequestNamesItsKeyNeverItsScope) {
  config::IdempotencyConfig idem;
  WriteIntent intent;
  intent.idempotency.config = &idem;
  intent.idempotency.client_key = "pay-123";
  intent.idempotency.scope = "Bearer secret";
  RequestRecord record;
  record.started = Clock::now();
  record.outcome = "replayed";
  std::string text =
      AccessLogLine(record, "req-4", "10.0.0.1", "POST", "/pay/1", intent, record.started, kWall);
  nlohmann::json line = Parse(text);
  EXPECT_EQ(line["idempotency_key"], "pay-123");
  EXPECT_EQ(line["outcome"], "replayed");
  EXPECT_EQ(text.find("secret"), std::string::npos) << text;
}

TEST(AccessLog, TimestampsAreRfc3339UtcWithMilliseconds) {
  using std::chrono::system_clock;
  EXPECT_EQ(Rfc3339Millis(kWall), "2026-12-06T13:10:00.123Z");
  EXPECT_EQ(Rfc3339Millis(system_clock::time_point{}), "1970-01-01T00:00:00.000Z");
  // Leap day, last millisecond of the day; microseconds are cut, not rounded.
  EXPECT_EQ(Rfc3339Millis(system_clock::time_point{std::chrono::microseconds(951868799999999)}),
            "2000-02-29T23:59:59.999Z");
  EXPECT_EQ(Rfc3339Millis(system_clock::time_point{milliseconds(4102444799000)}),
            "2099-12-31T23:59:59.000Z");
}

TEST(AccessLog, FieldsComeInTheirDocumentedOrderTimestampFirst) {
  Route route;
  route.name = "objects";
  config::IdempotencyConfig idem;
  WriteIntent intent;
  intent.kind = WriteIntent::Kind::kFence;
  intent.route = &route;
  intent.key = "/objects/a";
  intent.token = 7;
  intent.shadow_violation = "stale";
  intent.idempotency.config = &idem;
  intent.idempotency.client_key = "k";
  RequestRecord record;
  record.outcome = "forwarded";
  record.status = 201;
  const Clock::time_point t0 = Clock::now();
  record.started = t0;
  record.upstream_started = t0;
  record.upstream_ended = t0 + milliseconds(1);
  std::string text =
      AccessLogLine(record, "req-5", "10.0.0.1", "PUT", "/objects/a", intent, t0, kWall);
  EXPECT_EQ(text.rfind("{\"ts\":\"2026-12-06T13:10:00.123Z\",\"request_id\":\"req-5\",", 0), 0U)
      << text;
  const char* order[] = {"\"ts\"", "\"request_id\"", "\"client\"", "\"method\"",
                         "\"path\"", "\"route\"", "\"key\"", "\"token\"",
                         "\"idempotency_key\"", "\"outcome\"", "\"status\"",
                         "\"bytes_in\"", "\"bytes_out\"", "\"upstream_ms\"", "\"total_ms\"",
                         "\"shadow_violation\""};
  size_t at = 0;
  for (const char* field : order) {
    size_t found = text.find(field);
    ASSERT_NE(found, std::string::npos) << field << " in " << text;
    EXPECT_GT(found + 1, at) << field << " out of order in " << text;
    at = found + 1;
  }
}

TEST(AccessLog, OddBytesInPathAndKeyAreEscapedOnOneLine) {
  WriteIntent intent;
  intent.key = "a\"b\\c\nd\x01" "e\x7f";  // quote, backslash, newline, control, DEL
  RequestRecord record;
  record.started = Clock::now();
  std::string path("/p\"q\r\n{\"x\":1}\t\x00z", 16);
  std::string text = AccessLogLine(record, "req-6", "10.0.0.1", "PUT", path, intent,
                                   record.started, kWall);
  EXPECT_EQ(text.find('\n'), std::string::npos) << text;  // one line whatever the bytes
  EXPECT_EQ(text.find('\r'), std::string::npos) << text;
  EXPECT_NE(text.find(R"("key":"a\"b\\c\nd\u0001e)"), std::string::npos) << text;
  EXPECT_NE(text.find(R"(\u0000z")"), std::string::npos) << text;
  nlohmann::json line = Parse(text);
  EXPECT_EQ(line["key"], intent.key);
  EXPECT_EQ(line["path"], path);
}

TEST(AccessLog, ResetKeepsNothingOfTheLastRequest) {
  RequestRecord record;
  record.outcome = "forwarded";
  record.status = 200;
  record.bytes_in = record.bytes_out = 9;
  record.upstream_started = record.upstream_ended = Clock::now();
  record.Reset();
  EXPECT_TRUE(record.outcome.empty());
  EXPECT_EQ(record.status, 0U);
  EXPECT_EQ(record.bytes_in, 0U);
  EXPECT_EQ(record.bytes_out, 0U);
  EXPECT_EQ(record.upstream_started, Clock::time_point{});
  EXPECT_EQ(record.upstream_ended, Clock::time_point{});
}

}  // namespace
}  // namespace fencegate::proxy

namespace fencegate::proxy {
namespace {

// What nlohmann::json makes of `text` when it is valid UTF-8; nullopt when
// it is not (the strict handler throws).
std::optional<std::string> StrictJson(const std::string& text) {
  try {
    return nlohmann::json(text).dump();
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

TEST(AccessLogJsonString, ValidUtf8IsKeptAndEveryOtherByteBecomesOneReplacement) {
  std::string out;
  AppendJsonString(out, "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80z");  // é € 😀
  EXPECT_EQ(out, "\"a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80z\"");
  // Overlong, surrogate, beyond U+10FFFF, lone continuation, cut short.
  for (std::string bad : {"\xC0\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\x80", "\xE2\x82"}) {
    out.clear();
    AppendJsonString(out, bad);
    EXPECT_TRUE(StrictJson(nlohmann::json::parse(out).get<std::string>())) << out;
    EXPECT_NE(out.find("\xEF\xBF\xBD"), std::string::npos) << out;
  }
}

TEST(AccessLogJsonString, AgreesWithNlohmannOnEveryByteAndOnRandomStrings) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> byte(0, 255), length(0, 12);
  std::vector<std::string> inputs;
  for (int b = 0; b < 256; ++b) inputs.emplace_back(1, static_cast<char>(b));
  for (int i = 0; i < 20000; ++i) {
    std::string s;
    for (int n = length(rng); n > 0; --n) s += static_cast<char>(byte(rng));
    inputs.push_back(s);
  }
  int valid = 0;
  for (const std::string& s : inputs) {
    std::string out;
    AppendJsonString(out, s);
    ASSERT_EQ(out.find('\n'), std::string::npos);
    // Always a JSON string that a strict parser takes, and valid UTF-8.
    auto parsed = nlohmann::json::parse(out, nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(parsed.is_string()) << out;
    ASSERT_TRUE(StrictJson(parsed.get<std::string>()));
    if (std::optional<std::string> strict = StrictJson(s)) {
      ++valid;
      EXPECT_EQ(parsed.get<std::string>(), s);  // valid UTF-8 comes back unchanged
    }
  }
  EXPECT_GT(valid, 1000);  // the comparison above ran on many strings
}

}  // namespace
}  // namespace fencegate::proxy
