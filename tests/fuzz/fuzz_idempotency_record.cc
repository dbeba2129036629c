// Fuzz target: the stored idempotency record's decoder
// (storage/idempotency_record.h), which reads bytes from disk or from
// another replica, and the decisions every engine makes on them
// (storage/idempotency_store.h).
//
// Input: the bytes of one stored record.
//
// Invariants checked (a violation traps):
//  - the decoder accepts exactly what the encoder writes: a record it
//    accepts encodes back to the very input bytes, and
//    ValidateIdempotencyRecord accepts it too;
//  - an accepted record's replayable fields hold no CR, LF or NUL, its
//    status is 100..599 and its kept body is as long as it says;
//  - a refusal is Corruption, and then no decision changes anything;
//  - on an accepted record, Reserve at its creation time never takes a live
//    record, Lookup answers it while live and nothing after it expires,
//    Release applies only to a reservation with its owner.

#include <cstdint>
#include <optional>
#include <string>

#include "storage/idempotency_record.h"
#include "storage/idempotency_store.h"
#include "tests/fuzz/fuzz_util.h"

namespace fencegate::fuzz {
namespace {

using storage::IdempotencyRecord;
using storage::RecordDecision;
using storage::Reservation;
using storage::Status;
using State = IdempotencyRecord::State;

IdempotencyRecord Probe(int64_t now) {
  IdempotencyRecord r;
  r.owner = 7;
  r.created_ms = now;
  r.expires_ms = now + 1000;
  r.head_digest = std::string(storage::kDigestBytes, 'p');
  return r;
}

}  // namespace
}  // namespace fencegate::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fencegate::fuzz;  // NOLINT(google-build-using-namespace): the target's own helpers
  const std::string bytes(AsText(data, size));
  const std::optional<std::string> stored = bytes;
  IdempotencyRecord rec;
  const Status s = fencegate::storage::DecodeIdempotencyRecord(bytes, &rec);
  Reservation answer;
  RecordDecision change;
  std::optional<IdempotencyRecord> found;
  if (!s.ok()) {
    FUZZ_CHECK(s.code() == Status::Code::kCorruption);
    FUZZ_CHECK(!fencegate::storage::DecideReserve(stored, Probe(0), &answer, &change).ok());
    FUZZ_CHECK(!change.apply);
    FUZZ_CHECK(!fencegate::storage::DecideRelease(stored, 7, &change).ok());
    FUZZ_CHECK(!change.apply);
    FUZZ_CHECK(!fencegate::storage::DecideLookup(stored, 0, &found).ok());
    return 0;
  }
  FUZZ_CHECK(fencegate::storage::EncodeIdempotencyRecord(rec) == bytes);
  // What the store checks before it writes a record agrees with the decoder.
  FUZZ_CHECK(fencegate::storage::ValidateIdempotencyRecord(rec).ok());
  if (rec.state == State::kFinished) {
    FUZZ_CHECK(rec.response.status >= 100 && rec.response.status <= 599);
    for (const auto& [name, value] : rec.response.headers) {
      FUZZ_CHECK(!name.empty());
      for (char c : name + value) FUZZ_CHECK(c != '\r' && c != '\n' && c != '\0');
    }
    FUZZ_CHECK(!rec.response.body_kept || rec.response.body.size() == rec.response.body_bytes);
  }
  // Decisions at its creation time (live unless it expires at once) and at
  // its expiry.
  const bool live = rec.Live(rec.created_ms);
  FUZZ_CHECK(fencegate::storage::DecideReserve(stored, Probe(rec.created_ms), &answer, &change).ok());
  FUZZ_CHECK(answer.reserved == !live && change.apply == !live);
  FUZZ_CHECK(!live || (answer.existing && *answer.existing == rec));
  FUZZ_CHECK(fencegate::storage::DecideLookup(stored, rec.created_ms, &found).ok());
  FUZZ_CHECK(found.has_value() == live);
  FUZZ_CHECK(fencegate::storage::DecideLookup(stored, rec.expires_ms, &found).ok());
  FUZZ_CHECK(!found.has_value());
  FUZZ_CHECK(fencegate::storage::DecideRelease(stored, rec.owner, &change).ok());
  FUZZ_CHECK(change.apply == (rec.state == State::kReserved));
  FUZZ_CHECK(fencegate::storage::DecideRelease(stored, rec.owner + 1, &change).ok());
  FUZZ_CHECK(!change.apply);
  return 0;
}
