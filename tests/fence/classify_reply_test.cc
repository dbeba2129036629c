// Classify's refusals are fencegate's JSON replies (net/replies.h) even
// when the key holds bytes a client chose that are not UTF-8.

#include <gtest/gtest.h>

#include <boost/beast/http/fields.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "fence/classify.h"
#include "fence/router.h"
#include "net/replies.h"

namespace fencegate::proxy {
namespace {

nlohmann::json Body(const Reply& reply) {
  auto body = nlohmann::json::parse(reply.body(), nullptr, /*allow_exceptions=*/false);
  EXPECT_TRUE(body.is_object()) << reply.body();
  return body;
}

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

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
