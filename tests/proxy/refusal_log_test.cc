// The refusal log (proxy/refusal_log.h): the line's fields and quoting, the
// error code read back from fencegate's own reply, and the per-second cap.

#include "proxy/refusal_log.h"

#include <gtest/gtest.h>

#include <string>

#include "fence/router.h"
#include "net/replies.h"

namespace fencegate::proxy {
namespace {

TEST(RefusalLog, AFencedRefusalNamesRouteKeyTokenAndNoMore) {
  Route route;
  route.name = "objects";
  WriteIntent intent;
  intent.kind = WriteIntent::Kind::kFence;
  intent.route = &route;
  intent.key = "/objects/a";
  intent.token = 3;
  Refusal refusal{409, "stale_token", "rid-1", "10.0.0.1", "PUT", "/objects/a"};
  EXPECT_EQ(RefusalLine(refusal, intent),
            "refused 409 stale_token request_id=rid-1 route=\"objects\" key=\"/objects/a\" "
            "token=3 client=10.0.0.1 method=\"PUT\" path=\"/objects/a\"");
}

TEST(RefusalLog, WhatIsNotKnownIsLeftOut) {
  WriteIntent intent;  // refused before it was classified (431, 400)
  Refusal refusal{431, "headers_too_large", "-", "::1", "", ""};
  EXPECT_EQ(RefusalLine(refusal, intent), "refused 431 headers_too_large request_id=- client=::1");
  refusal.error = "";
  EXPECT_EQ(RefusalLine(refusal, intent), "refused 431 - request_id=- client=::1");
}

TEST(RefusalLog, BytesAClientChoseStayOnOneLine) {
  WriteIntent intent;
  intent.key = "k\n2026-12-06 info forged\xFF";
  Refusal refusal{400, "bad_path", "rid", "10.0.0.1", "PUT", "/a\r\nb\"c"};
  std::string line = RefusalLine(refusal, intent);
  EXPECT_EQ(line.find('\n'), std::string::npos) << line;
  EXPECT_EQ(line.find('\r'), std::string::npos) << line;
  EXPECT_NE(line.find(R"(key="k\n2026-12-06 info forged)" "\xEF\xBF\xBD\""), std::string::npos)
      << line;
  EXPECT_NE(line.find(R"(path="/a\r\nb\"c")"), std::string::npos) << line;
}

TEST(RefusalLog, TheErrorCodeComesFromTheReply) {
  EXPECT_EQ(ErrorCodeOf(MakeStale("/objects/a", 3, 9).body()), "stale_token");
  EXPECT_EQ(ErrorCodeOf(MakeError(http::status::payload_too_large, "body_too_large", "m").body()),
            "body_too_large");
  EXPECT_EQ(ErrorCodeOf("not json"), "");
  EXPECT_EQ(ErrorCodeOf(R"({"error":7})"), "");
}

TEST(RefusalLog, AtMostTheCapASecondAndTheNextLineSaysHowManyWereHeldBack) {
  RefusalLimiter limiter(3);
  uint64_t held_back = 99;
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(limiter.Admit(10, &held_back));
    EXPECT_EQ(held_back, 0U);
  }
  EXPECT_FALSE(limiter.Admit(10, &held_back));
  EXPECT_FALSE(limiter.Admit(10, &held_back));
  // The next second: lines again, the first one carrying the count.
  EXPECT_TRUE(limiter.Admit(11, &held_back));
  EXPECT_EQ(held_back, 2U);
  EXPECT_TRUE(limiter.Admit(11, &held_back));
  EXPECT_EQ(held_back, 0U);
  // A quiet gap does not lose the count either.
  EXPECT_TRUE(limiter.Admit(11, &held_back));
  EXPECT_FALSE(limiter.Admit(11, &held_back));
  EXPECT_TRUE(limiter.Admit(500, &held_back));
  EXPECT_EQ(held_back, 1U);
}

}  // namespace
}  // namespace fencegate::proxy
