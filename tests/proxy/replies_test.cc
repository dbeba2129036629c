// fencegate's own JSON replies (docs/contract.md, "Responses") with bytes a
// client chose.

#include "net/replies.h"

#include <gtest/gtest.h>

#include <boost/beast/http/fields.hpp>

#include "fence/fence_filter.h"
#include "fence/router.h"

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

TEST(Replies, TokenRequiredForAHeaderKeyWithNonUtf8ValueIsJson) {
  config::RouteConfig rc;
  rc.name = "documents";
  rc.path_prefix = "/documents/";
  rc.key = "{header:X-Tenant}:{path}";
  std::string error;
  auto router = Router::Build({rc}, &error);
  ASSERT_TRUE(router) << error;
  boost::beast::http::fields headers;
  headers.set("X-Tenant", "caf\xC3\xA9\xFF");
  WriteIntent intent;
  ASSERT_NO_THROW(intent = Classify(FenceSettings{}, *router, "PUT", "/documents/d", headers));
  ASSERT_EQ(intent.kind, WriteIntent::Kind::kReject);
  ASSERT_TRUE(intent.reply);
  EXPECT_EQ(intent.reply->result(), http::status::precondition_required);
  EXPECT_EQ(Body(*intent.reply)["key"],
            "caf\xC3\xA9" + std::string(kReplacement) + ":/documents/d");
}

}  // namespace
}  // namespace fencegate::proxy
