// Sizes ("65536", "512KiB", "1MiB"): what ParseSize accepts and refuses,
// and how FormatSize names a size in messages.

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string_view>

#include "config/internal.h"

namespace fencegate::config {
namespace {

TEST(SizeTest, Parses) {
  using internal::ParseSize;
  EXPECT_EQ(ParseSize("0"), 0u);
  EXPECT_EQ(ParseSize("65536"), 65536u);
  EXPECT_EQ(ParseSize("1KiB"), 1024u);
  EXPECT_EQ(ParseSize("512KiB"), 524288u);
  EXPECT_EQ(ParseSize("1MiB"), 1048576u);
  EXPECT_EQ(ParseSize("2GiB"), 2147483648u);
  EXPECT_EQ(ParseSize("18446744073709551615"), 18446744073709551615u);
  for (std::string_view bad : {"", "MiB", "1 MiB", "1MB", "1kb", "1mib", "-1", "+1", "1.5MiB",
                               "1MiBB", "18446744073709551616", "17179869184GiB", "1KiB1"}) {
    EXPECT_EQ(ParseSize(bad), std::nullopt) << bad;
  }
}

TEST(SizeTest, Formats) {
  using internal::FormatSize;
  EXPECT_EQ(FormatSize(0), "0");
  EXPECT_EQ(FormatSize(1), "1");
  EXPECT_EQ(FormatSize(1500), "1500");
  EXPECT_EQ(FormatSize(2048), "2KiB");
  EXPECT_EQ(FormatSize(67108864), "64MiB");
  EXPECT_EQ(FormatSize(uint64_t{3} << 30), "3GiB");
}

}  // namespace
}  // namespace fencegate::config
