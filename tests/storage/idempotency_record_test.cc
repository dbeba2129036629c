// The idempotency record's encoding (storage/idempotency_record.h): what is
// written reads back the same, and every kind of damage reads as
// Corruption naming it.

#include "storage/idempotency_record.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace fencegate::storage {
namespace {

using State = IdempotencyRecord::State;

IdempotencyRecord Reserved() {
  IdempotencyRecord r;
  r.state = State::kReserved;
  r.owner = 0x0102030405060708;
  r.created_ms = 1'780'000'000'000;
  r.expires_ms = r.created_ms + 60'000;
  r.head_digest = std::string(kDigestBytes, 'h');
  return r;
}

IdempotencyRecord Finished() {
  IdempotencyRecord r = Reserved();
  r.state = State::kFinished;
  r.expires_ms = r.created_ms + 86'400'000;
  r.body_digest = std::string(kDigestBytes, 'b');
  r.response.status = 201;
  r.response.headers = {{"Content-Type", "application/json"}, {"Location", "/pay/123"},
                        {"X-Empty", ""}};
  r.response.body = std::string("{\"id\":\"pay-123\"}\0tail", 21);
  r.response.body_bytes = r.response.body.size();
  return r;
}

std::string Error(std::string_view bytes) {
  IdempotencyRecord out;
  Status s = DecodeIdempotencyRecord(bytes, &out);
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  return s.message();
}

TEST(IdempotencyRecord, AReservationReadsBackTheSame) {
  IdempotencyRecord back;
  ASSERT_TRUE(DecodeIdempotencyRecord(EncodeIdempotencyRecord(Reserved()), &back).ok());
  EXPECT_EQ(back, Reserved());
}

TEST(IdempotencyRecord, AFinishedRecordReadsBackByteForByte) {
  const std::string bytes = EncodeIdempotencyRecord(Finished());
  IdempotencyRecord back;
  ASSERT_TRUE(DecodeIdempotencyRecord(bytes, &back).ok());
  EXPECT_EQ(back, Finished());
  EXPECT_EQ(EncodeIdempotencyRecord(back), bytes);
}

TEST(IdempotencyRecord, ABodyNotKeptKeepsItsLengthOnly) {
  IdempotencyRecord r = Finished();
  r.response.body.clear();
  r.response.body_kept = false;
  r.response.body_bytes = 5u << 20;
  IdempotencyRecord back;
  ASSERT_TRUE(DecodeIdempotencyRecord(EncodeIdempotencyRecord(r), &back).ok());
  EXPECT_FALSE(back.response.body_kept);
  EXPECT_EQ(back.response.body_bytes, 5u << 20);
}

TEST(IdempotencyRecord, EveryTruncationIsCorruption) {
  const std::string bytes = EncodeIdempotencyRecord(Finished());
  for (size_t n = 0; n < bytes.size(); ++n) {
    IdempotencyRecord out;
    EXPECT_EQ(DecodeIdempotencyRecord(bytes.substr(0, n), &out).code(),
              Status::Code::kCorruption)
        << "prefix of " << n << " bytes";
  }
}

TEST(IdempotencyRecord, DamageIsNamed) {
  std::string bytes = EncodeIdempotencyRecord(Finished());
  EXPECT_EQ(Error(bytes + "x"), "idempotency record: bytes after the record");
  std::string b = bytes;
  b[0] = 2;
  EXPECT_EQ(Error(b), "idempotency record: format 2, expected 1");
  b = bytes;
  b[1] = 3;
  EXPECT_EQ(Error(b), "idempotency record: state 3");
  // A reservation with a body digest, a finished record without one.
  IdempotencyRecord r = Reserved();
  r.body_digest = std::string(kDigestBytes, 'b');
  EXPECT_EQ(Error(EncodeIdempotencyRecord(r)), "idempotency record: body digest of 32 bytes");
  r = Finished();
  r.body_digest.clear();
  EXPECT_EQ(Error(EncodeIdempotencyRecord(r)), "idempotency record: body digest of 0 bytes");
  r = Finished();
  r.expires_ms = r.created_ms - 1;
  EXPECT_EQ(Error(EncodeIdempotencyRecord(r)), "idempotency record: expires before it was created");
  r = Finished();
  r.response.status = 99;
  EXPECT_EQ(Error(EncodeIdempotencyRecord(r)), "idempotency record: status 99");
  r = Finished();
  r.response.body_bytes += 1;
  EXPECT_EQ(Error(EncodeIdempotencyRecord(r)),
            "idempotency record: body length 21 for 22 bytes kept");
}

TEST(IdempotencyRecord, AHeaderThatWouldSplitTheReplayIsRefused) {
  // A replay writes the stored fields back to a client: a CR or LF in a
  // damaged record must not become a second field or a second response.
  const std::vector<std::string> values = {"a\r\nSet-Cookie: x=1", "a\nb", std::string("a\0b", 3),
                                           "a\x7f"};
  for (const std::string& value : values) {
    IdempotencyRecord r = Finished();
    r.response.headers.emplace_back("X-Note", value);
    EXPECT_EQ(Error(EncodeIdempotencyRecord(r)),
              "idempotency record: header field 3: control character in value");
  }
  IdempotencyRecord r = Finished();
  r.response.headers.emplace_back("Bad Name", "v");
  EXPECT_EQ(Error(EncodeIdempotencyRecord(r)),
            "idempotency record: header field 3: name is not a token");
  r = Finished();
  r.response.headers.emplace_back("", "v");
  EXPECT_EQ(Error(EncodeIdempotencyRecord(r)), "idempotency record: header field 3: bad name");
}

TEST(IdempotencyRecord, LengthsBeyondTheBoundsAreRefusedBeforeAllocating) {
  IdempotencyRecord r = Finished();
  r.response.headers.assign(kMaxStoredHeaders + 1, {"A", "b"});
  EXPECT_EQ(Error(EncodeIdempotencyRecord(r)), "idempotency record: 257 header fields");
  r = Finished();
  r.response.headers = {{"A", std::string(kMaxStoredHeaderBytes, 'v')}};
  EXPECT_EQ(Error(EncodeIdempotencyRecord(r)),
            "idempotency record: header field 0: bad value length");
}

}  // namespace
}  // namespace fencegate::storage

namespace fencegate::storage {
namespace {

// The store's check (ValidateIdempotencyRecord) says of a struct exactly
// what a round trip through the encoding says: the two agree on records
// that are fine and on each way a record can be unstorable.
TEST(IdempotencyRecordValidate, AgreesWithARoundTrip) {
  auto round_trips = [](const IdempotencyRecord& r) {
    IdempotencyRecord back;
    return DecodeIdempotencyRecord(EncodeIdempotencyRecord(r), &back).ok() && back == r;
  };
  IdempotencyRecord reserved;
  reserved.owner = 3;
  reserved.created_ms = 10;
  reserved.expires_ms = 20;
  reserved.head_digest = std::string(kDigestBytes, 'h');
  IdempotencyRecord finished = reserved;
  finished.state = IdempotencyRecord::State::kFinished;
  finished.body_digest = std::string(kDigestBytes, 'b');
  finished.response.status = 200;
  finished.response.headers = {{"Content-Type", "text/plain"}};
  finished.response.body = "ok";
  finished.response.body_bytes = 2;

  std::vector<std::pair<std::string, IdempotencyRecord>> cases = {{"reserved", reserved},
                                                                 {"finished", finished}};
  auto variant = [&](const std::string& name, const IdempotencyRecord& base, auto change) {
    IdempotencyRecord r = base;
    change(r);
    cases.emplace_back(name, r);
  };
  variant("expires before created", reserved, [](auto& r) { r.expires_ms = 5; });
  variant("short head digest", reserved, [](auto& r) { r.head_digest = "h"; });
  variant("reserved with body digest", reserved, [](auto& r) { r.body_digest = "b"; });
  variant("reserved with a response", reserved, [](auto& r) { r.response.status = 200; });
  variant("finished without body digest", finished, [](auto& r) { r.body_digest.clear(); });
  variant("status 99", finished, [](auto& r) { r.response.status = 99; });
  variant("status 600", finished, [](auto& r) { r.response.status = 600; });
  variant("empty header name", finished, [](auto& r) { r.response.headers = {{"", "v"}}; });
  variant("name not a token", finished, [](auto& r) { r.response.headers = {{"A B", "v"}}; });
  variant("CR in value", finished, [](auto& r) { r.response.headers = {{"A", "x\r\ny"}}; });
  variant("tab in value", finished, [](auto& r) { r.response.headers = {{"A", "x\ty"}}; });
  variant("too many fields", finished, [](auto& r) {
    r.response.headers.assign(kMaxStoredHeaders + 1, {"A", "v"});
  });
  variant("as many fields as allowed", finished, [](auto& r) {
    r.response.headers.assign(kMaxStoredHeaders, {"A", "v"});
  });
  variant("field too long", finished, [](auto& r) {
    r.response.headers = {{"A", std::string(kMaxStoredHeaderBytes, 'v')}};
  });
  variant("length not the body's", finished, [](auto& r) { r.response.body_bytes = 3; });
  variant("not kept, with a body", finished, [](auto& r) { r.response.body_kept = false; });
  variant("not kept, no body", finished, [](auto& r) {
    r.response.body_kept = false;
    r.response.body.clear();
    r.response.body_bytes = 5'000'000;
  });
  variant("unknown state", reserved,
          [](auto& r) { r.state = static_cast<IdempotencyRecord::State>(3); });
  for (const auto& [name, r] : cases) {
    EXPECT_EQ(ValidateIdempotencyRecord(r).ok(), round_trips(r)) << name;
  }
  EXPECT_TRUE(ValidateIdempotencyRecord(finished).ok());
  EXPECT_FALSE(ValidateIdempotencyRecord(cases[2].second).ok());
}

}  // namespace
}  // namespace fencegate::storage
