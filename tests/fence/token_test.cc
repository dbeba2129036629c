#include "fence/token.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace fencegate::proxy {
namespace {

using namespace std::string_literals;

struct GoodToken {
  std::string text;
  uint64_t value;
};

void PrintTo(const GoodToken& c, std::ostream* os) { *os << '"' << c.text << '"'; }

class TokenOk : public ::testing::TestWithParam<GoodToken> {};

TEST_P(TokenOk, Parses) {
  const TokenParse p = ParseTokenValue(GetParam().text);
  ASSERT_EQ(p.status, TokenStatus::kOk) << GetParam().text << ": " << p.reason;
  EXPECT_EQ(p.value, GetParam().value);
}

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

INSTANTIATE_TEST_SUITE_P(
    Contract, TokenOk,
    ::testing::Values(GoodToken{"0", 0}, GoodToken{"1", 1}, GoodToken{"7", 7}, GoodToken{"42", 42},
                      GoodToken{"0034", 34}, GoodToken{"00000000000000000034", 34},  // 20 chars
                      GoodToken{"00000000000000000000", 0},                          // 20 zeros
                      GoodToken{"4294967296", 4294967296ULL},                        // 2^32
                      GoodToken{"9999999999999999999", 9999999999999999999ULL},      // 19 digits
                      GoodToken{"10000000000000000000", 10000000000000000000ULL},
                      GoodToken{"18446744073709551609", kMax - 6},
                      GoodToken{"18446744073709551614", kMax - 1},
                      GoodToken{"18446744073709551615", kMax}));

struct BadToken {
  std::string text;
  std::string reason_contains;  // a word the 400 body must carry
};

void PrintTo(const BadToken& c, std::ostream* os) {
  *os << '"';
  for (unsigned char ch : c.text) {
    if (ch < 0x20 || ch >= 0x7f) {
      *os << "\\x" << std::hex << static_cast<int>(ch) << std::dec;
    } else {
      *os << ch;
    }
  }
  *os << '"';
}

class TokenMalformed : public ::testing::TestWithParam<BadToken> {};

TEST_P(TokenMalformed, IsRefusedWithReason) {
  const TokenParse p = ParseTokenValue(GetParam().text);
  EXPECT_EQ(p.status, TokenStatus::kMalformed) << "value " << p.value;
  EXPECT_NE(std::string(p.reason), "");
  EXPECT_NE(std::string(p.reason).find(GetParam().reason_contains), std::string::npos)
      << "reason was: " << p.reason;
}

INSTANTIATE_TEST_SUITE_P(
    Contract, TokenMalformed,
    ::testing::Values(
        BadToken{"", "empty"}, BadToken{"+1", "sign"}, BadToken{"-1", "sign"},
        BadToken{"-0", "sign"}, BadToken{" 1", "whitespace"}, BadToken{"1 ", "whitespace"},
        BadToken{"1 2", "whitespace"}, BadToken{"\t1", "whitespace"}, BadToken{"1\t", "whitespace"},
        BadToken{"0x10", "hexadecimal"}, BadToken{"0X10", "hexadecimal"}, BadToken{"1,2", "list"},
        BadToken{"1, 2", "list"}, BadToken{"1.0", "integer"}, BadToken{"1e3", "digits"},
        BadToken{"ff", "digits"}, BadToken{"abc", "digits"}, BadToken{"\"1\"", "digits"},
        BadToken{"1;q=1", "digits"}, BadToken{"\xEF\xBC\x91", "digits"},  // FULLWIDTH DIGIT ONE
        BadToken{"1\0"s, "digits"}, BadToken{"\0"s, "digits"},
        // Overflow, detected exactly.
        BadToken{"18446744073709551616", "larger"},  // 2^64
        BadToken{"18446744073709551620", "larger"}, BadToken{"18446744073709551700", "larger"},
        BadToken{"19000000000000000000", "larger"}, BadToken{"99999999999999999999", "larger"},
        // More than 20 digits, even when the value is small.
        BadToken{"000000000000000000034", "20 digits"},
        BadToken{"000000000000000000000", "20 digits"},
        BadToken{"123456789012345678901", "20 digits"},
        // A byte that is not a digit is named first, whatever the length.
        BadToken{"9999999999999999999a", "digits"}, BadToken{"99999999999999999999a", "digits"},
        BadToken{"99999999999999999999999 ", "whitespace"}));

TEST(TokenHeaders, NoHeaderIsMissing) {
  const TokenParse p = ParseTokenHeaders({});
  EXPECT_EQ(p.status, TokenStatus::kMissing);
}

TEST(TokenHeaders, OneHeaderIsParsed) {
  const std::vector<std::string_view> values = {"0034"};
  const TokenParse p = ParseTokenHeaders(values);
  ASSERT_EQ(p.status, TokenStatus::kOk);
  EXPECT_EQ(p.value, 34u);
}

TEST(TokenHeaders, OneEmptyHeaderIsMalformedNotMissing) {
  const std::vector<std::string_view> values = {""};
  EXPECT_EQ(ParseTokenHeaders(values).status, TokenStatus::kMalformed);
}

TEST(TokenHeaders, OneBadHeaderIsMalformed) {
  const std::vector<std::string_view> values = {"1,2"};
  const TokenParse p = ParseTokenHeaders(values);
  EXPECT_EQ(p.status, TokenStatus::kMalformed);
  EXPECT_NE(std::string(p.reason).find("list"), std::string::npos) << p.reason;
}

TEST(TokenHeaders, TwoHeadersAreMalformedEvenWhenEqual) {
  for (const std::vector<std::string_view>& values :
       {std::vector<std::string_view>{"5", "5"}, std::vector<std::string_view>{"1", "2"},
        std::vector<std::string_view>{"1", "x"}, std::vector<std::string_view>{"1", "2", "3"}}) {
    const TokenParse p = ParseTokenHeaders(values);
    EXPECT_EQ(p.status, TokenStatus::kMalformed) << values.size() << " headers";
    EXPECT_NE(std::string(p.reason).find("more than once"), std::string::npos) << p.reason;
  }
}

// Every 1..20 digit string of the same digit, compared with std::stoull
// where it fits: a second opinion on the accumulation.
TEST(TokenValue, AgreesWithStoull) {
  for (char d = '0'; d <= '9'; ++d) {
    for (size_t n = 1; n <= 20; ++n) {
      const std::string s(n, d);
      const TokenParse p = ParseTokenValue(s);
      unsigned long long expected = 0;
      bool fits = true;
      try {
        expected = std::stoull(s);
      } catch (const std::out_of_range&) {
        fits = false;
      }
      if (fits) {
        ASSERT_EQ(p.status, TokenStatus::kOk) << s;
        EXPECT_EQ(p.value, expected) << s;
      } else {
        EXPECT_EQ(p.status, TokenStatus::kMalformed) << s;
      }
    }
  }
}

}  // namespace
}  // namespace fencegate::proxy
