// RocksDbStore's write side: where a request goes (Enqueue, Submit), deciding on
// the caller's thread (DecideOnCaller), the writer thread's group-commit
// loop (WriterLoop, CommitBatch) and its memtable switches (FlushIfDue).
// What a batch's decision is: rocksdb_decide.cc.

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include <rocksdb/db.h>

#include "storage/rocksdb_store.h"
#include "storage/rocksdb_support.h"

namespace fencegate::storage {

using rocksdb_support::Answer;

void RocksDbStore::Enqueue(bool raise, std::string key, uint64_t token, FenceHandler handler,
                           std::unique_ptr<BatchRequest> batch) {
  Status rejected = batch ? CheckBatchItems(batch->items, kMaxKeyBytes)
                         : CheckTokenKey(key, kMaxKeyBytes);
  if (!rejected.ok()) {
    if (batch) return batch->handler(rejected, BatchFence{});
    return handler(rejected, Fence{});
  }
  WriteRequest request;
  request.raise = raise;
  request.key = std::move(key);
  request.token = token;
  request.handler = std::move(handler);
  request.batch = std::move(batch);
  Submit(std::move(request));
}

void RocksDbStore::Submit(WriteRequest request) {
  Status rejected;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (lane_.closing) {
      rejected = Status::Unavailable("token store is closed");
    } else if (decide_on_caller_ && lane_.TakeForCaller()) {
      // Async durability and nobody deciding: decide on this thread.
      lock.unlock();
      DecideOnCaller(std::move(request));
      return;
    } else if (lane_.queue.size() >= options_.max_queued) {
      rejected = Status::Unavailable("token store write queue is full (" +
                                     std::to_string(lane_.queue.size()) +
                                     " pending)");
    } else {
      const bool wake = lane_.Queue(std::move(request));
      lock.unlock();
      if (wake) writer_cv_.notify_one();
      return;
    }
  }
  Outcome outcome;
  outcome.status = std::move(rejected);
  Answer(request, outcome);
}

void RocksDbStore::DecideOnCaller(WriteRequest request) {
  Outcome outcome;
  const bool done =
      Decide(std::span(&request, 1), /*from_caller=*/true, std::span(&outcome, 1));
  if (done) {
    // Still holding the lane, as the writer does: handlers run in the order
    // their requests were decided.
    caller_decided_.fetch_add(1, std::memory_order_relaxed);
    Answer(request, outcome);
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (!done) {
    // Decided nothing, wrote nothing: the writer decides it, before
    // anything queued meanwhile.
    lane_.PutBack(std::move(request));
  } else if (lane_.MoreForCaller()) {
    // Others queued while this thread decided (they found the lane busy):
    // take one batch of theirs too, rather than wake the writer for it. A
    // batch that would wait for the disk goes back, in order, to the writer.
    std::vector<WriteRequest> batch;
    batch.reserve(std::min(options_.max_batch, lane_.queue.size()));
    lane_.TakeBatch(options_.max_batch, &batch);
    lock.unlock();
    std::vector<Outcome> outcomes(batch.size());
    const bool taken = Decide(batch, /*from_caller=*/true, outcomes);
    if (taken) {
      caller_decided_.fetch_add(batch.size(), std::memory_order_relaxed);
      for (size_t i = 0; i < batch.size(); ++i) Answer(batch[i], outcomes[i]);
    }
    lock.lock();
    if (!taken) lane_.PutBack(batch);
  }
  const bool wake = LaneReleasedLocked();
  lock.unlock();
  if (wake) writer_cv_.notify_one();
}

bool RocksDbStore::LaneReleasedLocked() {
  return lane_.Release(/*flush_wanted=*/wal_bytes_ >= options_.wal_bytes_per_flush);
}

void RocksDbStore::WriterLoop() {
  std::vector<WriteRequest> batch;
  for (;;) {
    batch.clear();
    bool recover = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // Never while a caller decides on its own thread (the lane is busy):
      // that caller answers, lets go of the lane, and wakes this thread if
      // anything is left queued.
      auto ready = [this] { return lane_.WriterReady(); };
      for (;;) {
        if (lane_.failed) {
          if (writer_cv_.wait_for(lock, options_.recovery_interval, ready)) {
            break;
          }
          if (!lane_.busy) {  // idle after a failed write: try to recover
            recover = true;
            break;
          }
        } else {
          // A caller's failed write sets failed: then wait for the timer.
          writer_cv_.wait(lock, [&] { return ready() || lane_.failed; });
          if (ready()) break;
        }
      }
      if (!recover) {
        if (lane_.Drained()) return;  // all answered
        lane_.TakeBatch(options_.max_batch, &batch);
      }
      lane_.TakeForWriter();
    }
    if (recover) {
      if (Status s = Recover(/*probe=*/true); s.ok()) {
        lane_.failed = false;
        SetHealth(Status::Ok());
      } else {
        SetHealth(std::move(s));
      }
    } else {
      if (!batch.empty()) CommitBatch(batch);
      FlushIfDue();
    }
    std::lock_guard<std::mutex> lock(mu_);
    (void)LaneReleasedLocked();  // this thread looks at the queue next
  }
}

void RocksDbStore::CommitBatch(std::vector<WriteRequest>& batch) {
  std::vector<Outcome> outcomes(batch.size());
  Decide(batch, /*from_caller=*/false, outcomes);
  // Every change of the batch is committed (or none is): answer in order.
  for (size_t i = 0; i < batch.size(); ++i) Answer(batch[i], outcomes[i]);
}

void RocksDbStore::FlushIfDue() {
  if (wal_bytes_ < options_.wal_bytes_per_flush || lane_.failed) return;
  // Not waiting for the flush itself (it runs on RocksDB's background
  // thread): the switch to a new memtable and WAL file is all that happens
  // here. A failure shows on the next write, which then fails and recovers
  // as any failed write does; the count starts again either way.
  rocksdb::FlushOptions flush;
  flush.wait = false;
  flush.allow_write_stall = true;
  rocksdb::Status s = db_->Flush(flush);
  s.PermitUncheckedError();
  wal_bytes_ = 0;
  flushes_.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace fencegate::storage
