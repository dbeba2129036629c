// ParseLockTarget: the lock endpoint's URL shape and lock names.

#include <gtest/gtest.h>

#include "locks/lock_session.h"

namespace fencegate::locks {
namespace {

struct Parsed {
  bool matched = false;
  bool name_ok = false;
  std::string name;
  LockOp op{};
};

Parsed Parse(std::string_view target) {
  Parsed p;
  p.matched = ParseLockTarget(target, &p.name, &p.op, &p.name_ok);
  return p;
}

TEST(LockTargetTest, ThreeOperations) {
  Parsed p = Parse("/v1/locks/orders/acquire");
  EXPECT_TRUE(p.matched && p.name_ok);
  EXPECT_EQ(p.name, "orders");
  EXPECT_EQ(p.op, LockOp::kAcquire);
  EXPECT_EQ(Parse("/v1/locks/orders/renew").op, LockOp::kRenew);
  EXPECT_EQ(Parse("/v1/locks/orders/release").op, LockOp::kRelease);
}

TEST(LockTargetTest, NameIsPercentDecoded) {
  Parsed p = Parse("/v1/locks/tenant%2F42%20a/acquire");
  EXPECT_TRUE(p.matched && p.name_ok);
  EXPECT_EQ(p.name, "tenant/42 a");
}

TEST(LockTargetTest, OtherShapesDoNotMatch) {
  EXPECT_FALSE(Parse("/v1/locks/orders").matched);
  EXPECT_FALSE(Parse("/v1/locks/orders/steal").matched);
  EXPECT_FALSE(Parse("/v1/keys/orders/acquire").matched);
  EXPECT_FALSE(Parse("/").matched);
}

TEST(LockTargetTest, BadNamesAreRefused) {
  EXPECT_FALSE(Parse("/v1/locks//acquire").name_ok);           // empty
  EXPECT_FALSE(Parse("/v1/locks/a/b/acquire").name_ok);         // two segments
  EXPECT_FALSE(Parse("/v1/locks/a%00b/acquire").name_ok);       // NUL
  EXPECT_FALSE(Parse("/v1/locks/a%0Ab/acquire").name_ok);       // control character
  EXPECT_FALSE(Parse("/v1/locks/a%zz/acquire").name_ok);        // bad encoding
  EXPECT_FALSE(Parse("/v1/locks/a?x=1/acquire").name_ok);       // query inside
  EXPECT_TRUE(Parse("/v1/locks/" + std::string(256, 'n') + "/acquire").name_ok);
  EXPECT_FALSE(Parse("/v1/locks/" + std::string(257, 'n') + "/acquire").name_ok);
}

TEST(LockTargetTest, StoreKeysCannotMeetProxyKeys) {
  std::string key = LockStoreKey("orders");
  ASSERT_EQ(key.size(), 13u);
  EXPECT_EQ(key[0], '\0');
  EXPECT_EQ(key.substr(1), "locks/orders");
}

}  // namespace
}  // namespace fencegate::locks
