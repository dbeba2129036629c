#include "storage/idempotency_store.h"

#include <algorithm>
#include <string>
#include <utility>

namespace fencegate::storage {
namespace {

using State = IdempotencyRecord::State;

// The stored record, decoded; nullopt when there is none.
Status Stored(const std::optional<std::string>& stored, std::optional<IdempotencyRecord>* out) {
  out->reset();
  if (!stored) return Status::Ok();
  IdempotencyRecord rec;
  Status s = DecodeIdempotencyRecord(*stored, &rec);
  if (!s.ok()) return s;
  *out = std::move(rec);
  return Status::Ok();
}

}  // namespace

Status CheckRecordKey(const std::string& key) {
  if (key.empty()) return Status::InvalidArgument("empty idempotency record key");
  if (key.size() > kMaxRecordKeyBytes) {
    return Status::InvalidArgument("idempotency record key of " + std::to_string(key.size()) +
                                   " bytes (at most " + std::to_string(kMaxRecordKeyBytes) + ")");
  }
  return Status::Ok();
}

Status CheckRecordFor(const IdempotencyRecord& record, State want) {
  if (record.state != want) {
    return Status::InvalidArgument(want == State::kReserved
                                       ? "a reservation must be in state reserved"
                                       : "a finished record must be in state finished");
  }
  return ValidateIdempotencyRecord(record);
}

Status DecideReserve(const std::optional<std::string>& stored,
                     const IdempotencyRecord& reservation, Reservation* answer,
                     RecordDecision* change) {
  std::optional<IdempotencyRecord> rec;
  Status s = Stored(stored, &rec);
  if (!s.ok()) return s;
  *change = {};
  *answer = {};
  if (rec && rec->Live(reservation.created_ms)) {
    answer->existing = std::move(rec);
    return Status::Ok();
  }
  answer->reserved = true;
  answer->replaced_expired = rec.has_value();
  change->apply = true;
  change->put = EncodeIdempotencyRecord(reservation);
  return Status::Ok();
}

Status DecideFinish(const std::optional<std::string>& stored, const IdempotencyRecord& finished,
                    int64_t now_ms, RecordDecision* change) {
  std::optional<IdempotencyRecord> rec;
  Status s = Stored(stored, &rec);
  if (!s.ok()) return s;
  *change = {};
  const bool ours = rec && rec->state == State::kReserved && rec->owner == finished.owner;
  if (ours || !rec || !rec->Live(now_ms)) {
    change->apply = true;
    change->put = EncodeIdempotencyRecord(finished);
  }
  return Status::Ok();
}

Status DecideRelease(const std::optional<std::string>& stored, uint64_t owner,
                     RecordDecision* change) {
  std::optional<IdempotencyRecord> rec;
  Status s = Stored(stored, &rec);
  if (!s.ok()) return s;
  *change = {};
  if (rec && rec->state == State::kReserved && rec->owner == owner) change->apply = true;
  return Status::Ok();
}

Status DecideRenew(const std::optional<std::string>& stored, uint64_t owner, int64_t expires_ms,
                   RecordDecision* change) {
  std::optional<IdempotencyRecord> rec;
  Status s = Stored(stored, &rec);
  if (!s.ok()) return s;
  *change = {};
  if (!rec || rec->state != State::kReserved || rec->owner != owner) return Status::Ok();
  change->apply = true;  // applied even when already as late: the owner still holds it
  rec->expires_ms = std::max(rec->expires_ms, expires_ms);
  change->put = EncodeIdempotencyRecord(*rec);
  return Status::Ok();
}

Status DecideLookup(const std::optional<std::string>& stored, int64_t now_ms,
                    std::optional<IdempotencyRecord>* answer) {
  Status s = Stored(stored, answer);
  if (!s.ok()) return s;
  if (*answer && !(*answer)->Live(now_ms)) answer->reset();
  return Status::Ok();
}

}  // namespace fencegate::storage
