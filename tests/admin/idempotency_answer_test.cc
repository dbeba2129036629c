// The admin listener's answers about idempotency keys
// (admin/idempotency_answer.h): every counter, and a record without its
// response's body or header values.

#include "admin/idempotency_answer.h"

#include <gtest/gtest.h>

#include <string>

namespace fencegate::proxy {
namespace {

using nlohmann::json;

TEST(AdminIdempotency, CountersAreEachShownByName) {
  IdempotencyCounters c;
  c.executions = 1;
  c.replays = 2;
  c.mismatches = 3;
  c.conflicts = 4;
  c.waits = 5;
  c.expirations = 6;
  c.releases = 7;
  c.not_kept = 8;
  c.store_errors = 9;
  EXPECT_EQ(IdempotencyCountersJson(c),
            json({{"executions", 1}, {"replays", 2}, {"mismatches", 3}, {"conflicts", 4},
                  {"waits", 5}, {"expirations", 6}, {"releases", 7}, {"not_kept", 8},
                  {"store_errors", 9}}));
}

std::string Times(const std::string& text, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += text;
  return out;
}

storage::IdempotencyRecord Finished() {
  storage::IdempotencyRecord r;
  r.state = storage::IdempotencyRecord::State::kFinished;
  r.owner = 77;
  r.created_ms = 1000;
  r.expires_ms = 3601000;
  r.head_digest = std::string(storage::kDigestBytes, '\x01');
  r.body_digest = std::string(storage::kDigestBytes, '\xab');
  r.response.status = 201;
  r.response.headers = {{"Content-Type", "application/json"},
                        {"Set-Cookie", "session=private-cookie"}};
  r.response.body = "private-body";
  r.response.body_bytes = 12;
  return r;
}

TEST(AdminIdempotency, AFinishedRecordShowsItsResponseWithoutBodyOrHeaderValues) {
  json j = IdempotencyRecordJson("pay", "k1", false, Finished());
  EXPECT_EQ(j, json({{"route", "pay"},
                     {"key", "k1"},
                     {"scoped", false},
                     {"state", "finished"},
                     {"created_ms", 1000},
                     {"expires_ms", 3601000},
                     {"fingerprint", {{"head", Times("01", 32)}, {"body", Times("ab", 32)}}},
                     {"response",
                      {{"status", 201},
                       {"body_bytes", 12},
                       {"body_kept", true},
                       {"header_names", {"Content-Type", "Set-Cookie"}}}}}));
  const std::string text = j.dump();
  EXPECT_EQ(text.find("private"), std::string::npos) << text;
  EXPECT_EQ(text.find("application/json"), std::string::npos) << text;
  EXPECT_EQ(text.find("owner"), std::string::npos) << text;
}

TEST(AdminIdempotency, AReservationHasNoResponseAndNoBodyDigestYet) {
  storage::IdempotencyRecord r = Finished();
  r.state = storage::IdempotencyRecord::State::kReserved;
  r.body_digest.clear();
  r.response = {};
  json j = IdempotencyRecordJson("pay", "k1", true, r);
  EXPECT_EQ(j["state"], "reserved");
  EXPECT_EQ(j["scoped"], true);
  EXPECT_TRUE(j["fingerprint"]["body"].is_null());
  EXPECT_EQ(j["fingerprint"]["head"].get<std::string>().size(), 64u);
  EXPECT_FALSE(j.contains("response"));
}

TEST(AdminIdempotency, AResponseTooLargeToKeepSaysSo) {
  storage::IdempotencyRecord r = Finished();
  r.response.body.clear();
  r.response.body_kept = false;
  r.response.body_bytes = 5u << 20;
  json j = IdempotencyRecordJson("pay", "k1", false, r);
  EXPECT_EQ(j["response"]["body_kept"], false);
  EXPECT_EQ(j["response"]["body_bytes"], 5u << 20);
}

}  // namespace
}  // namespace fencegate::proxy
