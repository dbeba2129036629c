// ParseDuration: table of accepted and rejected spellings.

#include <gtest/gtest.h>

#include <string>

#include "config/config.h"

namespace fencegate::config {
namespace {

struct DurationCase {
  const char* text;
  int64_t ms;
};

TEST(ParseDurationTest, AcceptsIntegerUnitSequences) {
  const DurationCase cases[] = {
      {"250ms", 250},         {"0ms", 0},         {"1s", 1000},       {"10s", 10000},
      {"5m", 300000},         {"24h", 86400000},  {"1h30m", 5400000}, {"1h30m15s", 5415000},
      {"2m500ms", 120500},    {"1h1ms", 3600001}, {"007s", 7000},     {"0s", 0},
      {"1h0m0s0ms", 3600000}, {"90m", 5400000},
  };
  for (const DurationCase& c : cases) {
    std::optional<Duration> parsed = ParseDuration(c.text);
    ASSERT_TRUE(parsed.has_value()) << c.text;
    EXPECT_EQ(parsed->count(), c.ms) << c.text;
  }
}

TEST(ParseDurationTest, RejectsMalformedText) {
  const char* cases[] = {
      "",     "10",   "s",       "-1s",  "+1s", "1.5s",  ".5s",   "1 s",     " 1s",  "1s ",
      "10S",  "1H",   "1d",      "1us",  "1ns", "1sec",  "1mss",  "1h30",    "h1",   "30m1h",
      "1s1s", "1s1m", "500ms1s", "1m1m", "abc", "1e3ms", "0x10s", "1_000ms", "1s\n", "1,5s",
  };
  for (const char* text : cases) {
    EXPECT_FALSE(ParseDuration(text).has_value()) << '"' << text << '"';
  }
}

TEST(ParseDurationTest, RejectsOverflow) {
  // Larger than int64 as digits.
  EXPECT_FALSE(ParseDuration("99999999999999999999ms").has_value());
  // Fits int64 milliseconds but not std::chrono::nanoseconds.
  EXPECT_FALSE(ParseDuration("9223372036854775807ms").has_value());
  EXPECT_FALSE(ParseDuration("3000000h").has_value());
  // Sum overflows even though each part fits.
  EXPECT_FALSE(ParseDuration("2562047h9223372036854ms").has_value());
}

TEST(ParseDurationTest, AcceptsTheLargestValueThatFitsNanoseconds) {
  const int64_t max_ms = std::numeric_limits<int64_t>::max() / 1'000'000;
  std::optional<Duration> parsed = ParseDuration(std::to_string(max_ms) + "ms");
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(parsed->count(), max_ms);
  EXPECT_FALSE(ParseDuration(std::to_string(max_ms + 1) + "ms").has_value());
  // 2562047h is just below the limit.
  EXPECT_TRUE(ParseDuration("2562047h").has_value());
  EXPECT_FALSE(ParseDuration("2562048h").has_value());
}

}  // namespace
}  // namespace fencegate::config
