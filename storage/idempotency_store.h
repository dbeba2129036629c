#pragma once
// IdempotencyStore: the records of idempotency keys (docs/contract.md,
// "Idempotency keys"), kept by the same engine as the fence so that they
// live where the tokens live: on the embedded store's disk, or shared by
// replicas. An engine that keeps them returns itself from
// TokenStore::Idempotency().
//
// Keys are the caller's: it names a record by route, scope and the
// client's key, in at most kMaxRecordKeyBytes. Every record carries its
// own expiry (idempotency_record.h), and every call its caller's clock
// (now_ms), so that what is live is decided the same way whatever the
// engine: an engine removes expired records in the background (a
// compaction filter, a sweep, a lease), and until it has, treats them as
// absent.
//
// As TokenStore's operations: asynchronous, each handler runs exactly once,
// on a thread of the store or on the caller's before the call returns; a
// call that changes a record is durable as the store's durability says
// before its handler runs; calls on one key are decided in the order they
// were made. A non-ok Status means nothing is known: the caller refuses
// the request rather than run it (fail closed).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "storage/idempotency_record.h"
#include "storage/status.h"

namespace fencegate::storage {

inline constexpr size_t kMaxRecordKeyBytes = 1024;

// What Reserve found.
struct Reservation {
  bool reserved = false;  // the caller's reservation is stored: run the request
  // When not reserved: the live record that is there (a reservation of
  // another request, or a finished request's response).
  std::optional<IdempotencyRecord> existing;
  // When reserved: an expired record was there (a finished request's window
  // or a reservation's in_flight_timeout ran out, and it was not yet
  // removed), and the reservation replaced it.
  bool replaced_expired = false;
};

class IdempotencyStore {
 public:
  using ReserveHandler = std::function<void(const Status&, Reservation)>;
  // applied: the record changed (false: it was not the caller's any more).
  using ChangeHandler = std::function<void(const Status&, bool applied)>;
  using LookupHandler = std::function<void(const Status&, std::optional<IdempotencyRecord>)>;

  virtual ~IdempotencyStore() = default;

  // Atomically: when no live record is under key at reservation.created_ms,
  // stores `reservation` (state kReserved) and answers reserved; otherwise
  // stores nothing and answers the live record. Of two Reserve calls on one
  // key, exactly one is reserved.
  virtual void ReserveKey(std::string key, IdempotencyRecord reservation,
                          ReserveHandler handler) = 0;

  // Stores the finished request's record (state kFinished, expires_ms the
  // end of its window) in place of the caller's reservation. Applied when
  // the stored record is a reservation with finished.owner, live or not, or
  // when nothing live is there at now_ms (the request ran: its result is
  // worth keeping even after its reservation ran out); not applied over a
  // live record of another owner.
  virtual void FinishKey(std::string key, IdempotencyRecord finished, int64_t now_ms,
                         ChangeHandler handler) = 0;

  // Removes the caller's reservation (a request that was not run: refused
  // by the fence, or never sent upstream). Applied only while the stored
  // record is a reservation with this owner.
  virtual void ReleaseKey(std::string key, uint64_t owner, ChangeHandler handler) = 0;

  // Extends the caller's reservation to expires_ms (never shortens it), so
  // that a request that lives longer than in_flight_timeout keeps its key.
  // Applied only while the stored record is a reservation with this owner,
  // live or not (nobody took it meanwhile). now_ms: the caller's clock.
  virtual void RenewKey(std::string key, uint64_t owner, int64_t expires_ms, int64_t now_ms,
                        ChangeHandler handler) = 0;

  // The live record under key at now_ms, or nullopt.
  virtual void LookupKey(std::string key, int64_t now_ms, LookupHandler handler) = 0;
};

// What every engine refuses before deciding anything: an empty key or one
// longer than kMaxRecordKeyBytes, a record that does not encode and decode
// back to itself, or one in the wrong state for the call (Reserve takes a
// kReserved record without body digest, Finish a kFinished one).
// InvalidArgument naming the problem, or ok.
Status CheckRecordKey(const std::string& key);
Status CheckRecordFor(const IdempotencyRecord& record, IdempotencyRecord::State want);

}  // namespace fencegate::storage

namespace fencegate::storage {

// The decisions, on the bytes an engine holds under the key (nullopt: no
// record), so that every engine decides alike; each engine makes the
// change in one atomic step with its read. A stored record that does not
// decode answers Corruption, and nothing changes.
struct RecordDecision {
  bool apply = false;  // store (*put) or delete the record
  std::optional<std::string> put;  // the bytes to store; nullopt with apply: delete
};
Status DecideReserve(const std::optional<std::string>& stored,
                     const IdempotencyRecord& reservation, Reservation* answer,
                     RecordDecision* change);
Status DecideFinish(const std::optional<std::string>& stored, const IdempotencyRecord& finished,
                    int64_t now_ms, RecordDecision* change);
Status DecideRelease(const std::optional<std::string>& stored, uint64_t owner,
                     RecordDecision* change);
Status DecideRenew(const std::optional<std::string>& stored, uint64_t owner, int64_t expires_ms,
                   RecordDecision* change);
Status DecideLookup(const std::optional<std::string>& stored, int64_t now_ms,
                    std::optional<IdempotencyRecord>* answer);

}  // namespace fencegate::storage
