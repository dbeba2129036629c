// Idempotency keys on the request side: what a key may be, which record it
// names, the fingerprint a repeat must match, and Classify's reading of the
// key on a route with `idempotency:`.

#include "fence/idempotency_key.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "fence/classify.h"

namespace fencegate::proxy {
namespace {

namespace http = boost::beast::http;

TEST(IdempotencyKeyTest, AKeyIsOneTo255VisibleAsciiBytes) {
  EXPECT_TRUE(IsValidIdempotencyKey("pay-123"));
  EXPECT_TRUE(IsValidIdempotencyKey(std::string(255, 'k')));
  EXPECT_TRUE(IsValidIdempotencyKey("!~\"{}"));
  EXPECT_FALSE(IsValidIdempotencyKey(""));
  EXPECT_FALSE(IsValidIdempotencyKey(std::string(256, 'k')));
  EXPECT_FALSE(IsValidIdempotencyKey("a b"));
  EXPECT_FALSE(IsValidIdempotencyKey("a\tb"));
  EXPECT_FALSE(IsValidIdempotencyKey(std::string("a\0b", 3)));
  EXPECT_FALSE(IsValidIdempotencyKey("caf\xc3\xa9"));
  EXPECT_FALSE(IsValidIdempotencyKey("a\x7f"));
}

TEST(IdempotencyKeyTest, Sha256MatchesTheStandardVectors) {
  Sha256 sha;
  EXPECT_EQ(HexOf(sha.Finish()),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  sha.Update("ab");
  sha.Update("c");  // fed in pieces, as a body streams
  EXPECT_EQ(HexOf(sha.Finish()),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  sha.Update("x");
  sha.Reset();  // drops the x
  sha.Update("abc");
  EXPECT_EQ(HexOf(sha.Finish()),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

// Parts that run into each other must not name one record: the route's
// name is length-prefixed and the scope hashed to a fixed width.
TEST(IdempotencyKeyTest, RecordKeysOfDifferentPartsDiffer) {
  std::set<std::string> keys = {
      IdempotencyRecordKey("pay", "", "k"),        IdempotencyRecordKey("pa", "", "yk"),
      IdempotencyRecordKey("pay", "a", "k"),       IdempotencyRecordKey("pay", "b", "k"),
      IdempotencyRecordKey("pay/", "", "k"),       IdempotencyRecordKey("pay", "", "/k"),
      IdempotencyRecordKey("1:pay", "", "k"),      IdempotencyRecordKey("pay", "k", ""),
  };
  EXPECT_EQ(keys.size(), 8u);
  EXPECT_EQ(IdempotencyRecordKey("pay", "", "k"), IdempotencyRecordKey("pay", "", "k"));
}

TEST(IdempotencyKeyTest, TheScopeIsNeverKeptInTheClear) {
  std::string key = IdempotencyRecordKey("pay", "Bearer secret-token", "k");
  EXPECT_EQ(key.find("secret"), std::string::npos) << key;
  EXPECT_LE(IdempotencyRecordKey(std::string(200, 'r'), std::string(1024, 's'),
                                 std::string(255, 'k'))
                .size(),
            24u + 200 + 64 + 255 + 2);
}

TEST(IdempotencyKeyTest, TheHeadDigestSeesEveryPartAndTheirBoundaries) {
  auto digest = [](std::string_view m, std::string_view p, std::optional<std::string_view> q,
                   std::string_view d, std::string_view s) {
    return IdempotencyHeadDigest(m, p, q, d, s);
  };
  std::set<std::string> all = {
      digest("POST", "/pay/1", std::nullopt, "", ""),
      digest("PUT", "/pay/1", std::nullopt, "", ""),
      digest("post", "/pay/1", std::nullopt, "", ""),
      digest("POST", "/pay/2", std::nullopt, "", ""),
      digest("POST", "/pay/1", "", "", ""),  // "?" with nothing after it
      digest("POST", "/pay/1", "a=1", "", ""),
      digest("POST", "/pay/1", std::nullopt, "/dest", ""),
      digest("POST", "/pay/1", std::nullopt, "", "tenant"),
      digest("POST", "/pay/1", std::nullopt, "tenant", ""),
  };
  EXPECT_EQ(all.size(), 9u);
  EXPECT_EQ(digest("POST", "/pay/1", "a=1", "", "t").size(), 32u);
}

// Classify, on a route with idempotency.
class ClassifyIdempotencyTest : public ::testing::Test {
 protected:
  void UseRoute(config::RouteMode mode, config::IdempotencyConfig idem) {
    config::RouteConfig r;
    r.name = "pay";
    r.path_regex = "^/pay/([^/]+)";
    r.mode = mode;
    r.idempotency = std::move(idem);
    std::string error;
    router_ = Router::Build({r}, &error);
    ASSERT_TRUE(router_) << error;
  }
  WriteIntent Classify(std::string_view method, std::string_view path,
                       const std::vector<std::pair<std::string, std::string>>& headers) {
    http::fields fields;
    for (const auto& [name, value] : headers) fields.insert(name, value);
    return proxy::Classify(settings_, *router_, method, path, fields);
  }
  static std::string Refusal(const WriteIntent& i) {
    if (i.kind != WriteIntent::Kind::kReject) return "";
    return nlohmann::json::parse(i.reply->body())["error"];
  }
  static config::IdempotencyConfig Idem() {
    config::IdempotencyConfig c;
    c.window = std::chrono::hours(1);
    return c;
  }

  FenceSettings settings_;
  std::unique_ptr<Router> router_;
};

TEST_F(ClassifyIdempotencyTest, AWriteWithAKeyNamesItsRecordInEveryMode) {
  for (auto mode : {config::RouteMode::kOff, config::RouteMode::kShadow,
                    config::RouteMode::kEnforce}) {
    UseRoute(mode, Idem());
    WriteIntent i =
        Classify("POST", "/pay/1", {{"Idempotency-Key", "k1"}, {"Fencing-Token", "5"}});
    ASSERT_NE(i.kind, WriteIntent::Kind::kReject) << Refusal(i);
    ASSERT_TRUE(i.idempotency.on());
    EXPECT_EQ(i.idempotency.route, "pay");
    EXPECT_EQ(i.idempotency.client_key, "k1");
    EXPECT_EQ(i.idempotency.record_key, IdempotencyRecordKey("pay", "", "k1"));
    EXPECT_EQ(i.kind, mode == config::RouteMode::kOff ? WriteIntent::Kind::kPassThrough
                                                      : WriteIntent::Kind::kFence);
  }
}

TEST_F(ClassifyIdempotencyTest, ReadsAndRequestsWithoutAKeyAreNotIdempotent) {
  UseRoute(config::RouteMode::kOff, Idem());
  EXPECT_FALSE(Classify("GET", "/pay/1", {{"Idempotency-Key", "k1"}}).idempotency.on());
  EXPECT_FALSE(Classify("POST", "/pay/1", {}).idempotency.on());
  EXPECT_FALSE(Classify("POST", "/other", {{"Idempotency-Key", "k1"}}).idempotency.on());
}

TEST_F(ClassifyIdempotencyTest, BadKeysAreRefused) {
  config::IdempotencyConfig idem = Idem();
  idem.required = true;
  UseRoute(config::RouteMode::kOff, idem);
  EXPECT_EQ(Refusal(Classify("POST", "/pay/1", {})), "idempotency_key_required");
  EXPECT_EQ(Refusal(Classify("POST", "/pay/1", {{"Idempotency-Key", ""}})),
            "bad_idempotency_key");
  EXPECT_EQ(Refusal(Classify("POST", "/pay/1", {{"Idempotency-Key", "a b"}})),
            "bad_idempotency_key");
  EXPECT_EQ(Refusal(Classify("POST", "/pay/1",
                             {{"Idempotency-Key", "a"}, {"idempotency-key", "a"}})),
            "bad_idempotency_key");
  EXPECT_EQ(Refusal(Classify("POST", "/pay/1", {{"Idempotency-Key", std::string(256, 'a')}})),
            "bad_idempotency_key");
  EXPECT_EQ(Refusal(Classify("POST", "/pay/1", {{"Idempotency-Key", std::string(255, 'a')}})),
            "");
}

TEST_F(ClassifyIdempotencyTest, TheScopeIsExpandedAndSeparatesRecords) {
  config::IdempotencyConfig idem = Idem();
  idem.scope = "{header:X-Tenant}/{1}";
  idem.header = "Request-Key";
  UseRoute(config::RouteMode::kOff, idem);
  WriteIntent a = Classify("POST", "/pay/1", {{"Request-Key", "k"}, {"X-Tenant", "a"}});
  WriteIntent b = Classify("POST", "/pay/1", {{"Request-Key", "k"}, {"X-Tenant", "b"}});
  ASSERT_TRUE(a.idempotency.on() && b.idempotency.on());
  EXPECT_EQ(a.idempotency.scope, "a/1");
  EXPECT_NE(a.idempotency.record_key, b.idempotency.record_key);
  EXPECT_EQ(Refusal(Classify("POST", "/pay/1", {{"Request-Key", "k"}})), "bad_idempotency_key");
  EXPECT_EQ(Refusal(Classify("POST", "/pay/1",
                             {{"Request-Key", "k"}, {"X-Tenant", "a"}, {"X-Tenant", "b"}})),
            "bad_idempotency_key");
}

TEST_F(ClassifyIdempotencyTest, AScopeUsingAGroupTheRouteLacksIsRefusedByTheRouter) {
  config::RouteConfig r;
  r.name = "pay";
  r.path_prefix = "/pay/";
  r.idempotency = Idem();
  r.idempotency->scope = "{1}";
  std::string error;
  EXPECT_EQ(Router::Build({r}, &error), nullptr);
  EXPECT_NE(error.find("idempotency scope"), std::string::npos) << error;
}

}  // namespace
}  // namespace fencegate::proxy
