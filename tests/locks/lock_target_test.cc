// ParseLockTarget: the lock endpoint's URL shape and lock names.

#include <gtest/gtest.h>

#include "locks/lock_request.h"

namespace fencegate::locks {
namespace {

namespace http = proxy::http;

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

LockRequest Post(std::string target, std::string body) {
  LockRequest req{http::verb::post, target, 11};
  req.body() = std::move(body);
  req.prepare_payload();
  return req;
}

nlohmann::json Body(const proxy::Reply& reply) {
  auto body = nlohmann::json::parse(reply.body(), nullptr, /*allow_exceptions=*/false);
  EXPECT_TRUE(body.is_object()) << reply.body();
  return body;
}

TEST(LockRequestTest, DecodesAcquireAndLease) {
  proxy::Reply refusal;
  auto call = DecodeLockRequest(
      Post("/v1/locks/a%20b/acquire", R"({"ttl": "1m30s", "wait": "5s"})"), Duration{300000},
      &refusal);
  ASSERT_TRUE(call);
  EXPECT_EQ(call->name, "a b");
  EXPECT_EQ(call->op, LockOp::kAcquire);
  EXPECT_EQ(call->ttl, Duration{90000});
  EXPECT_EQ(call->wait, Duration{5000});
  call = DecodeLockRequest(Post("/v1/locks/a/release", R"({"lease": "42"})"), Duration{1000},
                           &refusal);
  ASSERT_TRUE(call);
  EXPECT_EQ(call->lease, 42u);
  EXPECT_FALSE(DecodeLockRequest(Post("/v1/locks/a/acquire", R"({"ttl": "2s"})"), Duration{1000},
                                 &refusal));
  EXPECT_EQ(Body(refusal)["error"], "ttl_too_long");
}

// A target or lock name that is not UTF-8 still gets a JSON reply:
// nlohmann::json throws on such text, and an exception out of the lock
// listener's I/O thread would end the process (a fuzz_lock_request case).
TEST(LockRequestTest, NonUtf8TargetAndNameGiveJsonReplies) {
  proxy::Reply refusal;
  ASSERT_FALSE(DecodeLockRequest(Post("/v1/locks/orders/ac\xA8quire", "{}"), Duration{1000},
                                 &refusal));
  EXPECT_EQ(refusal.result(), http::status::not_found);
  EXPECT_EQ(Body(refusal)["error"], "not_found");

  auto call = DecodeLockRequest(Post("/v1/locks/caf%C3%A9%FF/release", R"({"lease": 1})"),
                                Duration{1000}, &refusal);
  ASSERT_TRUE(call);
  EXPECT_EQ(call->name, "caf\xC3\xA9\xFF");
  for (LockError e : {LockError::kHeld, LockError::kUnknownLease, LockError::kLeaseExpired,
                      LockError::kShuttingDown}) {
    proxy::Reply reply;
    ASSERT_NO_THROW(reply = LockReply(call->name, call->op, LockResult::Fail(e)));
    EXPECT_EQ(Body(reply)["lock"], "caf\xC3\xA9\xEF\xBF\xBD");
  }
}

}  // namespace
}  // namespace fencegate::locks
