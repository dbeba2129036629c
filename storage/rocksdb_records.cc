// RocksDbStore's idempotency records (idempotency_store.h): changes go
// through the writer lane as the tokens' do, so they are decided in call
// order and committed in the same batches, with the same durability and
// group commit; lookups go through the reader thread. Records live under
// kRecordKeyPrefix in the tokens' database (token_store.h); expired ones
// are answered as absent, and the compaction filter (rocksdb_options.cc)
// removes them.

#include <memory>
#include <optional>
#include <string>
#include <utility>

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include "storage/rocksdb_store.h"
#include "storage/rocksdb_support.h"

namespace fencegate::storage {

using rocksdb_support::FromRocks;
using rocksdb_support::Printable;
using rocksdb_support::RecordRequest;

namespace {

std::string StoredKey(const std::string& key) {
  std::string k;
  k.reserve(kRecordKeyPrefix.size() + key.size());
  k.append(kRecordKeyPrefix);
  k.append(key);
  return k;
}

}  // namespace

void RocksDbStore::SubmitRecord(const std::string& key, std::unique_ptr<RecordRequest> record) {
  WriteRequest w;
  w.key = StoredKey(key);
  w.record = std::move(record);
  Submit(std::move(w));
}

void RocksDbStore::ReserveKey(std::string key, IdempotencyRecord reservation,
                              ReserveHandler handler) {
  Status s = CheckRecordKey(key);
  if (s.ok()) s = CheckRecordFor(reservation, IdempotencyRecord::State::kReserved);
  if (!s.ok()) return handler(s, Reservation{});
  auto r = std::make_unique<RecordRequest>();
  r->kind = RecordRequest::Kind::kReserve;
  r->record = std::move(reservation);
  r->reserve_handler = std::move(handler);
  SubmitRecord(key, std::move(r));
}

void RocksDbStore::FinishKey(std::string key, IdempotencyRecord finished, int64_t now_ms,
                             ChangeHandler handler) {
  Status s = CheckRecordKey(key);
  if (s.ok()) s = CheckRecordFor(finished, IdempotencyRecord::State::kFinished);
  if (!s.ok()) return handler(s, false);
  auto r = std::make_unique<RecordRequest>();
  r->kind = RecordRequest::Kind::kFinish;
  r->record = std::move(finished);
  r->now_ms = now_ms;
  r->change_handler = std::move(handler);
  SubmitRecord(key, std::move(r));
}

void RocksDbStore::ReleaseKey(std::string key, uint64_t owner, ChangeHandler handler) {
  Status s = CheckRecordKey(key);
  if (!s.ok()) return handler(s, false);
  auto r = std::make_unique<RecordRequest>();
  r->kind = RecordRequest::Kind::kRelease;
  r->owner = owner;
  r->change_handler = std::move(handler);
  SubmitRecord(key, std::move(r));
}

void RocksDbStore::RenewKey(std::string key, uint64_t owner, int64_t expires_ms,
                            int64_t /*now_ms*/, ChangeHandler handler) {
  Status s = CheckRecordKey(key);
  if (!s.ok()) return handler(s, false);
  auto r = std::make_unique<RecordRequest>();
  r->kind = RecordRequest::Kind::kRenew;
  r->owner = owner;
  r->record.expires_ms = expires_ms;
  r->change_handler = std::move(handler);
  SubmitRecord(key, std::move(r));
}

void RocksDbStore::LookupKey(std::string key, int64_t now_ms, LookupHandler handler) {
  Status s = CheckRecordKey(key);
  if (!s.ok()) return handler(s, std::nullopt);
  ReadRequest r;
  r.key = StoredKey(key);
  r.now_ms = now_ms;
  r.lookup = std::move(handler);
  SubmitRead(std::move(r));
}

Status RocksDbStore::ReadRecord(const std::string& stored_key, std::optional<std::string>* bytes,
                                bool cache_only, bool on_lane) const {
  bytes->reset();
  rocksdb::PinnableSlice raw;
  rocksdb::Status s;
  rocksdb::ReadOptions ro;
  if (cache_only) ro.read_tier = rocksdb::kBlockCacheTier;
  {
    std::shared_lock<std::shared_mutex> lock(db_mu_, std::defer_lock);
    if (!on_lane) lock.lock();
    if (db_ == nullptr) return Status::IoError("token store is reopening after a write error");
    s = db_->Get(ro, db_->DefaultColumnFamily(), stored_key, &raw);
  }
  if (s.IsIncomplete() && cache_only) return Status::Busy("not cached");
  if (s.IsNotFound()) return Status::Ok();
  if (!s.ok()) {
    return FromRocks(s, "reading the store's own record '" +
                            Printable(std::string_view(stored_key).substr(kRecordKeyPrefix.size())) +
                            "'");
  }
  *bytes = raw.ToString();
  return Status::Ok();
}

Status RocksDbStore::DecideRecord(WriteRequest& r, bool from_caller, RecordsSeen& seen,
                                  rocksdb::WriteBatch& changes, Outcome& out) {
  std::optional<std::string> stored;
  if (auto it = seen.find(r.key); it != seen.end()) {
    stored = it->second;
  } else if (Status s = ReadRecord(r.key, &stored, from_caller, /*on_lane=*/true); !s.ok()) {
    out.status = s;
    return s;
  }
  RecordDecision change;
  Status s;
  RecordRequest& req = *r.record;
  req.applied = false;
  switch (req.kind) {
    case RecordRequest::Kind::kReserve:
      s = DecideReserve(stored, req.record, &req.reservation, &change);
      break;
    case RecordRequest::Kind::kFinish:
      s = DecideFinish(stored, req.record, req.now_ms, &change);
      break;
    case RecordRequest::Kind::kRelease:
      s = DecideRelease(stored, req.owner, &change);
      break;
    case RecordRequest::Kind::kRenew:
      s = DecideRenew(stored, req.owner, req.record.expires_ms, &change);
      break;
  }
  if (!s.ok()) {  // a damaged record: never overwritten
    out.status = s;
    return s;
  }
  if (change.apply) {
    rocksdb::Status p = change.put ? changes.Put(r.key, *change.put) : changes.Delete(r.key);
    if (!p.ok()) {
      out.status = FromRocks(p, "building write batch");
      return out.status;
    }
    stored = std::move(change.put);
  }
  seen[r.key] = std::move(stored);
  req.applied = change.apply;
  if (change.apply) record_writes_.fetch_add(1, std::memory_order_relaxed);
  return Status::Ok();
}

void RocksDbStore::AnswerLookup(ReadRequest& r) {
  std::optional<std::string> bytes;
  Status s = ReadRecord(r.key, &bytes, /*cache_only=*/false, /*on_lane=*/false);
  std::optional<IdempotencyRecord> answer;
  if (s.ok()) s = DecideLookup(bytes, r.now_ms, &answer);
  r.lookup(s, std::move(answer));
}

}  // namespace fencegate::storage
