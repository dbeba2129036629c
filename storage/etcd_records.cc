// EtcdStore's idempotency records (etcd_store.h): each call is read, a
// decision shared with every engine (idempotency_store.h), then a
// compare-and-set on the record's modification revision, read again when
// another replica changed the record in between. Run on the lane, one call
// at a time, in the order the calls were made.

#include <nlohmann/json.hpp>

#include <utility>

#include "storage/etcd_client.h"
#include "storage/etcd_store.h"

namespace fencegate::storage {

using nlohmann::json;

namespace {

constexpr int kRecordAttempts = 16;
constexpr int64_t kLeaseMinuteMs = 60'000;

}  // namespace

EtcdStore::Record EtcdStore::NewRecord(Record::Kind kind, std::string key) {
  Record call;
  call.kind = kind;
  call.key = std::move(key);
  return call;
}

void EtcdStore::ReserveKey(std::string key, IdempotencyRecord reservation,
                           ReserveHandler handler) {
  if (Status s = CheckRecordKey(key); !s.ok()) return handler(s, Reservation{});
  if (Status s = CheckRecordFor(reservation, IdempotencyRecord::State::kReserved); !s.ok()) {
    return handler(s, Reservation{});
  }
  Record call = NewRecord(Record::Kind::kReserve, std::move(key));
  call.record = std::move(reservation);
  call.now_ms = call.record.created_ms;
  call.reserve = std::move(handler);
  Enqueue(std::move(call));
}

void EtcdStore::FinishKey(std::string key, IdempotencyRecord finished, int64_t now_ms,
                          ChangeHandler handler) {
  if (Status s = CheckRecordKey(key); !s.ok()) return handler(s, false);
  if (Status s = CheckRecordFor(finished, IdempotencyRecord::State::kFinished); !s.ok()) {
    return handler(s, false);
  }
  Record call = NewRecord(Record::Kind::kFinish, std::move(key));
  call.record = std::move(finished);
  call.now_ms = now_ms;
  call.change = std::move(handler);
  Enqueue(std::move(call));
}

void EtcdStore::ReleaseKey(std::string key, uint64_t owner, ChangeHandler handler) {
  if (Status s = CheckRecordKey(key); !s.ok()) return handler(s, false);
  Record call = NewRecord(Record::Kind::kRelease, std::move(key));
  call.owner = owner;
  call.change = std::move(handler);
  Enqueue(std::move(call));
}

void EtcdStore::RenewKey(std::string key, uint64_t owner, int64_t expires_ms, int64_t now_ms,
                         ChangeHandler handler) {
  if (Status s = CheckRecordKey(key); !s.ok()) return handler(s, false);
  Record call = NewRecord(Record::Kind::kRenew, std::move(key));
  call.owner = owner;
  call.record.expires_ms = expires_ms;  // the lease the renewed record is put under
  call.now_ms = now_ms;
  call.change = std::move(handler);
  Enqueue(std::move(call));
}

void EtcdStore::LookupKey(std::string key, int64_t now_ms, LookupHandler handler) {
  if (Status s = CheckRecordKey(key); !s.ok()) return handler(s, std::nullopt);
  Record call = NewRecord(Record::Kind::kLookup, std::move(key));
  call.now_ms = now_ms;
  call.lookup = std::move(handler);
  Enqueue(std::move(call));
}

int64_t EtcdStore::LeaseFor(int64_t expires_ms, int64_t now_ms, Status* status) {
  // Leases whose minute has passed are etcd's to drop; forget them.
  while (!leases_.empty() && leases_.begin()->first <= now_ms) leases_.erase(leases_.begin());
  const int64_t minute = (expires_ms / kLeaseMinuteMs + 1) * kLeaseMinuteMs;
  if (auto it = leases_.find(minute); it != leases_.end()) return it->second;
  // A minute more than the minute's end: the lease never ends before a
  // record under it does, even if the clocks of etcd and this host differ
  // a little.
  const int64_t ttl_s = (minute - now_ms) / 1000 + 60;
  json answer;
  *status = CallEtcd("/v3/lease/grant", {{"TTL", std::to_string(ttl_s)}}, &answer,
                             /*retry_if_unknown=*/true);
  if (!status->ok()) return 0;
  int64_t id = 0;
  if (!EtcdClient::Int64Field(answer, "ID", &id) || id == 0) {
    *status = Status::Corruption("etcd granted a lease without an ID");
    return 0;
  }
  leases_[minute] = id;
  return id;
}

void EtcdStore::RunRecord(Record& call) {
  if (call.kind != Record::Kind::kLookup) counts_.requests.fetch_add(1, std::memory_order_relaxed);
  std::string name = options_.prefix;
  name.append("i/").append(call.key);
  const std::string key64 = EtcdClient::Base64(name);
  Status status;
  Reservation reservation;
  bool applied = false;
  bool settled = false;  // decided: no change needed, or the change made
  std::optional<IdempotencyRecord> found;
  for (int attempt = 0; attempt < kRecordAttempts; ++attempt) {
    json read;
    status = CallEtcd("/v3/kv/range", {{"key", key64}}, &read, true);
    SetHealth(status);
    if (!status.ok()) break;
    std::optional<std::string> stored;
    int64_t mod = 0;
    if (auto kvs = read.find("kvs"); kvs != read.end() && !kvs->empty()) {
      std::string bytes;
      if (!EtcdClient::FromBase64((*kvs)[0].value("value", std::string()), &bytes) ||
          !EtcdClient::Int64Field((*kvs)[0], "mod_revision", &mod)) {
        status = Status::Corruption("etcd answered a record that is not base64");
        break;
      }
      stored = std::move(bytes);
    }
    RecordDecision change;
    switch (call.kind) {
      case Record::Kind::kLookup:
        status = DecideLookup(stored, call.now_ms, &found);
        break;
      case Record::Kind::kReserve:
        status = DecideReserve(stored, call.record, &reservation, &change);
        break;
      case Record::Kind::kFinish:
        status = DecideFinish(stored, call.record, call.now_ms, &change);
        break;
      case Record::Kind::kRelease:
        status = DecideRelease(stored, call.owner, &change);
        break;
      case Record::Kind::kRenew:
        status = DecideRenew(stored, call.owner, call.record.expires_ms, &change);
        // The lease must outlast the record as renewed (never shortened).
        if (status.ok() && change.put) {
          (void)PeekIdempotencyExpiry(*change.put, &call.record.expires_ms);
        }
        break;
    }
    if (!status.ok()) break;
    if (!change.apply) {
      settled = true;
      break;
    }
    json op;
    if (change.put) {
      const int64_t lease = LeaseFor(call.record.expires_ms, call.now_ms, &status);
      if (!status.ok()) break;
      op = {{"requestPut",
             {{"key", key64}, {"value", EtcdClient::Base64(*change.put)},
              {"lease", std::to_string(lease)}}}};
    } else {
      op = {{"requestDeleteRange", {{"key", key64}}}};
    }
    json compare = {{"key", key64},
                    {"target", "MOD"},
                    {"result", "EQUAL"},
                    {"mod_revision", std::to_string(mod)}};
    json written;
    status = CallEtcd("/v3/kv/txn",
                              {{"compare", json::array({compare})}, {"success", json::array({op})}},
                              &written, true);
    SetHealth(status);
    CountWrite(0, status, status.ok() && EtcdClient::Succeeded(written) ? 1 : 0);
    if (status.code() == Status::Code::kNotFound) {
      // The lease ran out under us (etcd answers "requested lease not
      // found"): grant another and decide again.
      leases_.clear();
      continue;
    }
    if (!status.ok()) break;
    if (EtcdClient::Succeeded(written)) {
      applied = settled = true;
      break;
    }
    // Another replica changed the record since it was read: again.
    reservation = Reservation{};
  }
  if (status.ok() && !settled) {
    status = Status::Busy("an idempotency record kept changing under every attempt");
  }
  switch (call.kind) {
    case Record::Kind::kReserve:
      if (!status.ok()) reservation = Reservation{};
      return call.reserve(status, std::move(reservation));
    case Record::Kind::kFinish:
    case Record::Kind::kRelease:
    case Record::Kind::kRenew:
      return call.change(status, status.ok() && applied);
    case Record::Kind::kLookup:
      return call.lookup(status, status.ok() ? std::move(found) : std::nullopt);
  }
}

}  // namespace fencegate::storage
