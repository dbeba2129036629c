// fencegate's own JSON replies (docs/contract.md, "Responses") with bytes a
// client chose.

#include "net/replies.h"

#include <gtest/gtest.h>

namespace fencegate::proxy {
namespace {

nlohmann::json Body(const Reply& reply) {
  auto body = nlohmann::json::parse(reply.body(), nullptr, /*allow_exceptions=*/false);
  EXPECT_TRUE(body.is_object()) << reply.body();
  return body;
}

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

TEST(Replies, DumpJsonKeepsUtf8AndReplacesInvalidBytes) {
  EXPECT_EQ(DumpJson({{"k", "caf\xC3\xA9"}}), "{\"k\":\"caf\xC3\xA9\"}");
  EXPECT_EQ(DumpJson({{"k", "a\xFF"}}), "{\"k\":\"a" + std::string(kReplacement) + "\"}");
  EXPECT_EQ(DumpJson({{"k", "\xC3"}}), "{\"k\":\"" + std::string(kReplacement) + "\"}");
}

// A key built from a header value that is not UTF-8 still gives a JSON
// 409/428 reply (and access log line): nlohmann::json throws on such text,
// and the exception would end the proxy (a fuzz_request case).
TEST(Replies, StaleReplyWithNonUtf8KeyIsJson) {
  Reply reply;
  ASSERT_NO_THROW(reply = MakeStale("t\xFF:/objects/a", 3, 4));
  EXPECT_EQ(reply.result(), http::status::conflict);
  nlohmann::json body = Body(reply);
  EXPECT_EQ(body["error"], "stale_token");
  EXPECT_EQ(body["key"], "t" + std::string(kReplacement) + ":/objects/a");
  EXPECT_EQ(body["current"], 4);
}

}  // namespace
}  // namespace fencegate::proxy
