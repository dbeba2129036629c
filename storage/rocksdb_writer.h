#pragma once
// Private to the RocksDB engine: the write side of RocksDbStore. The
// requests Advance, AdvanceAll and Raise queue, what deciding them yields,
// and the lane's state: who may decide next, and when the writer thread
// must run (docs/architecture.md, "Who decides: the lane").

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "storage/idempotency_store.h"
#include "storage/token_store.h"

namespace fencegate::storage::rocksdb_support {

// An AdvanceAll's items and handler, apart so that an Advance's request
// stays as small as before (a null pointer).
struct BatchRequest {
  std::vector<KeyToken> items;
  TokenStore::BatchFenceHandler handler;
};

// An AdvanceTree's write and handler, and the verdict deciding it found.
struct TreeRequest {
  TreeWrite write;
  TokenStore::TreeHandler handler;
  TreeVerdict verdict;
};

// A change to an idempotency record (idempotency_store.h): the request's
// key is the record's stored key (kRecordKeyPrefix and the caller's key).
struct RecordRequest {
  enum class Kind { kReserve, kFinish, kRelease, kRenew };
  Kind kind = Kind::kReserve;
  IdempotencyRecord record;  // kReserve: the reservation; kFinish: the result
  uint64_t owner = 0;        // kRelease
  int64_t now_ms = 0;        // kFinish
  IdempotencyStore::ReserveHandler reserve_handler;  // kReserve
  IdempotencyStore::ChangeHandler change_handler;    // kFinish, kRelease, kRenew
  // What deciding it found: here rather than in Outcome, so that the
  // tokens' outcomes stay small (a batch makes one per request).
  Reservation reservation;  // kReserve
  bool applied = false;     // kFinish, kRelease, kRenew
};

struct WriteRequest {
  bool raise = false;  // Raise (never refuses) instead of Advance
  std::string key;
  uint64_t token = 0;
  TokenStore::FenceHandler handler;
  std::unique_ptr<BatchRequest> batch;  // AdvanceAll: key, token, handler unused
  std::unique_ptr<RecordRequest> record;  // a record's change: token, handler unused
  std::unique_ptr<TreeRequest> tree;  // AdvanceTree: key, token, handler unused
};

struct Outcome {
  Status status;
  Fence fence;
  BatchFence batch;  // AdvanceAll's
};

// Runs r's handler (Advance/Raise, AdvanceAll, AdvanceTree or a record's) with its outcome.
inline void Answer(WriteRequest& r, Outcome& o) {
  if (r.batch) return r.batch->handler(o.status, std::move(o.batch));
  if (r.tree) {
    return r.tree->handler(o.status, o.status.ok() ? std::move(r.tree->verdict) : TreeVerdict{});
  }
  if (r.record) {  // what it found counts only if its batch was written
    RecordRequest& rr = *r.record;
    if (rr.kind == RecordRequest::Kind::kReserve) {
      return rr.reserve_handler(o.status, o.status.ok() ? std::move(rr.reservation) : Reservation{});
    }
    return rr.change_handler(o.status, o.status.ok() && rr.applied);
  }
  r.handler(o.status, o.fence);
}

// The lane: the right to decide and commit (and to recover). The writer
// thread holds it for a batch or a recovery, a caller for its own request
// (decide_on_caller); one holder at a time, so requests stay decided in
// call order and the database changes under one owner. Every member is
// guarded by the store's mutex, except `failed` (below). The transitions
// are named after the moment they happen; none locks or waits.
struct WriteLane {
  std::deque<WriteRequest> queue;  // requests no one decides yet, in call order
  bool closing = false;    // Close() began: no new requests (Get's too)
  bool busy = false;       // someone holds the lane
  bool flush_due = false;  // a caller's write passed wal_bytes_per_flush: the writer flushes
  // The last write failed: recover before deciding. Written only by the
  // lane's holder; read under the mutex to choose the lane, and by the
  // holder without it.
  std::atomic<bool> failed{false};

  // A request arrives while nothing is queued, nobody decides and no failed
  // write waits for recovery: its caller takes the lane. False otherwise,
  // and nothing changes.
  bool TakeForCaller() {
    if (!queue.empty() || busy || failed) return false;
    busy = true;
    return true;
  }
  // A request that is not decided at once waits its turn. Returns whether
  // the writer must be woken: whoever holds the lane sees the queue when it
  // lets go (the writer loops, a caller takes the queue over or wakes the
  // writer), so only an idle writer needs it.
  bool Queue(WriteRequest&& request) {
    queue.push_back(std::move(request));
    return !busy;
  }
  // Moves up to `max` of the oldest queued requests to the end of *batch.
  void TakeBatch(size_t max, std::vector<WriteRequest>* batch) {
    size_t n = std::min(max, queue.size());
    for (size_t i = 0; i < n; ++i) {
      batch->push_back(std::move(queue.front()));
      queue.pop_front();
    }
  }
  // A holder that decided nothing gives requests back, ahead of anything
  // queued meanwhile, in their order.
  void PutBack(WriteRequest&& request) { queue.push_front(std::move(request)); }
  void PutBack(std::vector<WriteRequest>& batch) {
    for (auto it = batch.rbegin(); it != batch.rend(); ++it) queue.push_front(std::move(*it));
  }
  // A caller that decided its own request finds more queued meanwhile,
  // and no failed write: it decides one batch of them too.
  bool MoreForCaller() const { return !queue.empty() && !failed; }
  // The writer thread has something to start: a batch, a flush, or the
  // end; never while a caller holds the lane.
  bool WriterReady() const { return !busy && (closing || !queue.empty() || flush_due); }
  // Closing, and every request answered: the writer thread ends.
  bool Drained() const { return queue.empty() && closing; }
  // The writer thread takes the lane, and with it any flush that is due.
  void TakeForWriter() {
    busy = true;
    flush_due = false;
  }
  // The holder lets go. flush_wanted: wal_bytes_per_flush bytes went to the
  // WAL since the last switch. Returns whether the writer thread must run
  // (the caller wakes it after unlocking).
  bool Release(bool flush_wanted) {
    busy = false;
    // Not while a write failed: the writer recovers first (FlushIfDue would
    // do nothing, and a flush due would keep waking it before its recovery
    // timer ran out); the next release after the recovery sets it.
    if (flush_wanted && !failed) flush_due = true;
    return !queue.empty() || closing || failed || flush_due;
  }
};

}  // namespace fencegate::storage::rocksdb_support
