// Decoding of admin requests (admin/admin_request.h): the key in the
// target, the bearer check and the fence body.

#include "admin/admin_request.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "fence/router.h"

namespace fencegate::proxy {
namespace {

TEST(AdminTargets, KeyIsOnePercentEncodedSegment) {
  std::string key;
  bool fence = true;
  ASSERT_TRUE(ParseAdminKeyTarget("/v1/keys/%2Fobjects%2Fa", &key, &fence));
  EXPECT_EQ(key, "/objects/a");
  EXPECT_FALSE(fence);
  ASSERT_TRUE(ParseAdminKeyTarget("/v1/keys/%2Fobjects%2Fa/fence", &key, &fence));
  EXPECT_EQ(key, "/objects/a");
  EXPECT_TRUE(fence);
  EXPECT_FALSE(ParseAdminKeyTarget("/v1/keys/objects/a", &key, &fence));
  EXPECT_FALSE(ParseAdminKeyTarget("/v1/keys/", &key, &fence));
  EXPECT_FALSE(ParseAdminKeyTarget("/v1/keys/%zz", &key, &fence));
  EXPECT_FALSE(ParseAdminKeyTarget("/v1/other/x", &key, &fence));
}

// The length counts the decoded key: 1,024 bytes encoded as 3,072 is fine,
// 1,025 bytes is not, however it was written.
TEST(AdminTargets, AKeyOverTheLimitAfterDecodingIsRefused) {
  std::string key;
  bool fence = false;
  std::string encoded;
  for (size_t i = 0; i < kMaxKeyBytes; ++i) encoded += "%41";
  ASSERT_TRUE(ParseAdminKeyTarget("/v1/keys/" + encoded + "/fence", &key, &fence));
  EXPECT_EQ(key, std::string(kMaxKeyBytes, 'A'));
  EXPECT_EQ(CheckAdminKey(key), "");
  ASSERT_TRUE(ParseAdminKeyTarget("/v1/keys/" + encoded + "B", &key, &fence));
  EXPECT_EQ(key.size(), kMaxKeyBytes + 1);
  EXPECT_EQ(CheckAdminKey(key), "the key is 1025 bytes; a key is at most 1024 bytes");
}

TEST(AdminTargets, IdempotencyRecordIsRouteAndKeyEachOneSegment) {
  IdempotencyTarget t;
  ASSERT_TRUE(ParseIdempotencyTarget("/v1/idempotency/pay/k1", &t));
  EXPECT_EQ(t.route, "pay");
  EXPECT_EQ(t.key, "k1");
  EXPECT_EQ(t.scope, "");
  // Decoded, each part: a key may hold '/' and '?', a route name spaces;
  // what does not decode to a visible key is still parsed (the session
  // answers bad_idempotency_key).
  ASSERT_TRUE(ParseIdempotencyTarget("/v1/idempotency/my%20route/a%2Fb%3Fc", &t));
  EXPECT_EQ(t.route, "my route");
  EXPECT_EQ(t.key, "a/b?c");
  ASSERT_TRUE(ParseIdempotencyTarget("/v1/idempotency/pay/k%201", &t));
  EXPECT_EQ(t.key, "k 1");

  EXPECT_FALSE(ParseIdempotencyTarget("/v1/idempotency/pay", &t));
  EXPECT_FALSE(ParseIdempotencyTarget("/v1/idempotency/pay/", &t));
  EXPECT_FALSE(ParseIdempotencyTarget("/v1/idempotency//k1", &t));
  EXPECT_FALSE(ParseIdempotencyTarget("/v1/idempotency/pay/k1/more", &t));
  EXPECT_FALSE(ParseIdempotencyTarget("/v1/idempotency/pay/%zz", &t));
  EXPECT_FALSE(ParseIdempotencyTarget("/v1/idempotency/%zz/k1", &t));
  EXPECT_FALSE(ParseIdempotencyTarget("/v1/keys/pay/k1", &t));
}

TEST(AdminTargets, IdempotencyScopeIsTheOnlyQueryParameter) {
  IdempotencyTarget t;
  ASSERT_TRUE(ParseIdempotencyTarget("/v1/idempotency/pay/k1?scope=tenant%2Fa", &t));
  EXPECT_EQ(t.key, "k1");
  EXPECT_EQ(t.scope, "tenant/a");
  // '+' is a plus sign: a scope may be a base64 credential.
  ASSERT_TRUE(ParseIdempotencyTarget("/v1/idempotency/pay/k1?scope=Bearer%20ab+c=", &t));
  EXPECT_EQ(t.scope, "Bearer ab+c=");
  ASSERT_TRUE(ParseIdempotencyTarget("/v1/idempotency/pay/k1?scope=", &t));
  EXPECT_EQ(t.scope, "");
  // A scope from an earlier call does not linger.
  ASSERT_TRUE(ParseIdempotencyTarget("/v1/idempotency/pay/k1?scope=x", &t));
  ASSERT_TRUE(ParseIdempotencyTarget("/v1/idempotency/pay/k1", &t));
  EXPECT_EQ(t.scope, "");

  EXPECT_FALSE(ParseIdempotencyTarget("/v1/idempotency/pay/k1?", &t));
  EXPECT_FALSE(ParseIdempotencyTarget("/v1/idempotency/pay/k1?tenant=a", &t));
  EXPECT_FALSE(ParseIdempotencyTarget("/v1/idempotency/pay/k1?scope=a&scope=b", &t));
  EXPECT_FALSE(ParseIdempotencyTarget("/v1/idempotency/pay/k1?scope=a&x=1", &t));
  EXPECT_FALSE(ParseIdempotencyTarget("/v1/idempotency/pay/k1?scope=%zz", &t));
  EXPECT_FALSE(ParseIdempotencyTarget("/v1/idempotency/pay?scope=a", &t));
}

TEST(AdminAuth, ConstantTimeEquals) {
  EXPECT_TRUE(ConstantTimeEquals("secret", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("secret", "secreT"));
  EXPECT_FALSE(ConstantTimeEquals("secret", "secret2"));
  EXPECT_FALSE(ConstantTimeEquals("", "x"));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
}

TEST(AdminAuth, BearerMatches) {
  EXPECT_TRUE(BearerMatches("Bearer s3cret", "s3cret"));
  EXPECT_TRUE(BearerMatches("bEARER s3cret", "s3cret"));  // the scheme is case-insensitive
  EXPECT_FALSE(BearerMatches("Bearer S3cret", "s3cret"));  // the credential is not
  EXPECT_FALSE(BearerMatches("Bearer s3cret ", "s3cret"));
  EXPECT_FALSE(BearerMatches("Basic s3cret", "s3cret"));
  EXPECT_FALSE(BearerMatches("Bearer ", ""));  // an empty admin token never matches
  EXPECT_FALSE(BearerMatches("", ""));
}

std::optional<uint64_t> Token(const std::string& body) { return ParseFenceBody(body).token; }

TEST(AdminFenceBody, TheTokenIsAJsonNumberWhoseValueIsAnUnsigned64BitInteger) {
  EXPECT_EQ(Token(R"({"token": 42})"), 42u);
  EXPECT_EQ(Token(R"({"token":0})"), 0u);
  EXPECT_EQ(Token(R"( { "token" : 7 } )"), 7u);
  EXPECT_EQ(Token(R"({"token": 18446744073709551615})"), UINT64_MAX);
  // Integers written with a fraction or an exponent, read exactly (a double
  // would make the last two 18446744073709551616, then saturate or wrap).
  EXPECT_EQ(Token(R"({"token": 1e3})"), 1000u);
  EXPECT_EQ(Token(R"({"token": 1E+3})"), 1000u);
  EXPECT_EQ(Token(R"({"token": 1000.000})"), 1000u);
  EXPECT_EQ(Token(R"({"token": 15e-1})"), std::nullopt);
  EXPECT_EQ(Token(R"({"token": 150e-1})"), 15u);
  EXPECT_EQ(Token(R"({"token": 1.8446744073709551615e19})"), UINT64_MAX);
  EXPECT_EQ(Token(R"({"token": 18446744073709551614.0})"), UINT64_MAX - 1);
  EXPECT_EQ(Token(R"({"token": 0.0e99999999999})"), 0u);
  EXPECT_EQ(Token(R"({"token": -0})"), 0u);
  // The key written with an escape is still "token".
  EXPECT_EQ(Token(R"({"tok\u0065n": 5})"), 5u);
}

struct Refused {
  const char* body;
  const char* code;
  const char* message;
};

TEST(AdminFenceBody, EveryOtherBodyIsRefusedSayingWhatIsWrong) {
  const Refused cases[] = {
      // The token's value.
      {R"({"token": "42"})", "bad_token", R"("token" must be a JSON number, not a string)"},
      {R"({"token": null})", "bad_token", R"("token" must be a JSON number, not null)"},
      {R"({"token": true})", "bad_token", R"("token" must be a JSON number, not a boolean)"},
      {R"({"token": [1]})", "bad_token", R"("token" must be a JSON number, not an array)"},
      {R"({"token": {"n": 1}})", "bad_token", R"("token" must be a JSON number, not an object)"},
      {R"({"token": -1})", "bad_token", R"("token" must not be negative)"},
      {R"({"token": -1.5e3})", "bad_token", R"("token" must not be negative)"},
      {R"({"token": -99999999999999999999})", "bad_token", R"("token" must not be negative)"},
      {R"({"token": 1.5})", "bad_token", R"("token" must be an integer, not 1.5)"},
      {R"({"token": 1e-1})", "bad_token", R"("token" must be an integer, not 1e-1)"},
      {R"({"token": 1e-99999999999})", "bad_token",
       R"("token" must be an integer, not 1e-99999999999)"},
      {R"({"token": 18446744073709551616})", "bad_token",
       R"("token" is larger than 18446744073709551615)"},
      {R"({"token": 1.8446744073709551616e19})", "bad_token",
       R"("token" is larger than 18446744073709551615)"},
      {R"({"token": 1e20})", "bad_token", R"("token" is larger than 18446744073709551615)"},
      {R"({"token": 1e99999999999})", "bad_token",
       R"("token" is larger than 18446744073709551615)"},
      {R"({"token": -1e99999999999})", "bad_token", R"("token" must not be negative)"},
      {R"(1e99999999999)", "bad_request", R"(the body must be {"token": N}, not a number)"},
      // The body.
      {R"({"token": 1, "token": 2})", "bad_request",
       R"(the body must be {"token": N}: "token" is given twice)"},
      {R"({"token": 1, "tok\u0065n": 1})", "bad_request",
       R"(the body must be {"token": N}: "token" is given twice)"},
      {R"({"token": 1, "force": true})", "bad_request",
       R"(the body must be {"token": N}: unknown member "force" (a fence takes only "token"))"},
      {R"({"Token": 1})", "bad_request",
       R"(the body must be {"token": N}: unknown member "Token" (a fence takes only "token"))"},
      {R"({})", "bad_request", R"(the body must be {"token": N}: it has no "token")"},
      {R"([42])", "bad_request", R"(the body must be {"token": N}, not an array)"},
      {R"(42)", "bad_request", R"(the body must be {"token": N}, not a number)"},
      {R"(-42)", "bad_request", R"(the body must be {"token": N}, not a number)"},
      {R"("42")", "bad_request", R"(the body must be {"token": N}, not a string)"},
      {R"(null)", "bad_request", R"(the body must be {"token": N}, not null)"},
      {"", "bad_request", R"(the body must be {"token": N}: it is not valid JSON (at byte 1))"},
      {R"({"token": 4)", "bad_request",
       R"(the body must be {"token": N}: it is not valid JSON (at byte 12))"},
      {R"({"token": 4} x)", "bad_request",
       R"(the body must be {"token": N}: it is not valid JSON (at byte 14))"},
      {R"({"token": 04})", "bad_request",
       R"(the body must be {"token": N}: it is not valid JSON (at byte 12))"},
  };
  for (const Refused& c : cases) {
    FenceBody b = ParseFenceBody(c.body);
    EXPECT_EQ(b.token, std::nullopt) << c.body;
    EXPECT_EQ(b.code, c.code) << c.body;
    EXPECT_EQ(b.message, c.message) << c.body;
  }
}

}  // namespace
}  // namespace fencegate::proxy
