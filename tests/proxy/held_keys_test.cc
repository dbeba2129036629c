// HeldKeys (proxy/held_keys.h): which idempotency keys this process holds.

#include "proxy/held_keys.h"

#include <gtest/gtest.h>

#include <string>

namespace fencegate::proxy {
namespace {

using Clock = HeldKeys::Clock;

TEST(HeldKeysTest, AHeldKeyNamesItsOwnerUntilDropped) {
  HeldKeys held;
  EXPECT_FALSE(held.Holding("k").has_value());
  held.Hold("k", 7, "digest");
  auto holder = held.Holding("k");
  ASSERT_TRUE(holder.has_value());
  EXPECT_EQ(holder->owner, 7u);
  EXPECT_EQ(holder->head_digest, "digest");
  EXPECT_FALSE(held.Holding("other").has_value());
  held.Drop("k", 8);  // not the owner: nothing changes
  EXPECT_TRUE(held.Holding("k").has_value());
  held.Drop("k", 7);
  EXPECT_FALSE(held.Holding("k").has_value());
}

TEST(HeldKeysTest, ADropAtEndsTheHoldAtItsTime) {
  HeldKeys held;
  held.Hold("later", 1, "d");
  held.DropAt("later", 1, Clock::now() + std::chrono::hours(1));
  EXPECT_TRUE(held.Holding("later").has_value());
  held.Hold("past", 2, "d");
  held.DropAt("past", 3, Clock::now() - std::chrono::seconds(1));  // another owner's
  EXPECT_TRUE(held.Holding("past").has_value());
  held.DropAt("past", 2, Clock::now() - std::chrono::seconds(1));
  EXPECT_FALSE(held.Holding("past").has_value());
}

TEST(HeldKeysTest, ExpiredHoldsNobodyLooksUpAgainAreSwept) {
  HeldKeys held;
  const auto past = Clock::now() - std::chrono::seconds(1);
  for (int i = 0; i < 100; ++i) held.Hold("gone" + std::to_string(i), 1, "d", past);
  held.Hold("live", 1, "d");
  EXPECT_EQ(held.size(), 101u);
  for (int i = 0; i < 300; ++i) {
    held.Hold("busy", 2, "d");
    held.Drop("busy", 2);
  }
  EXPECT_EQ(held.size(), 1u) << "the expired holds were swept; the live one stays";
  EXPECT_TRUE(held.Holding("live").has_value());
}

}  // namespace
}  // namespace fencegate::proxy
