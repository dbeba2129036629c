#include "storage/rocksdb_store.h"

#include <algorithm>
#include <string_view>
#include <unordered_map>
#include <utility>

#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/write_batch.h>

#include <boost/container/small_vector.hpp>

#include "storage/journal.h"  // an earlier fencegate's journal, replayed at Open
#include "storage/rocksdb_support.h"

namespace fencegate::storage {
namespace {

// Decide's batch keeps a buffer up to this size between batches.
constexpr size_t kKeptBatchBytes = 64u << 10;

// Proves that the disk takes synced writes again (recovery): an empty write
// that syncs RocksDB's WAL.
rocksdb::Status SyncWal(rocksdb::DB* db) {
  rocksdb::WriteBatch empty;
  rocksdb::WriteOptions wo;
  wo.sync = true;
  return db->Write(wo, &empty);
}

}  // namespace

using rocksdb_support::DecodeToken;
using rocksdb_support::EncodeToken;
using rocksdb_support::FromRocks;
using rocksdb_support::kTokenBytes;
using rocksdb_support::Printable;

Status RocksDbStore::Open(const RocksDbStoreOptions& options,
                          std::unique_ptr<RocksDbStore>* result) {
  if (options.path.empty()) {
    return Status::InvalidArgument("storage.path is empty");
  }
  if (options.max_batch == 0 || options.max_queued == 0) {
    return Status::InvalidArgument("max_batch and max_queued must be > 0");
  }
  std::shared_ptr<rocksdb::FileSystem> fs =
      (options.env != nullptr ? options.env : rocksdb::Env::Default())->GetFileSystem();
  std::unique_ptr<rocksdb::DB> db;
  if (Status s = rocksdb_support::OpenDb(options, &db); !s.ok()) return s;
  // Segments an earlier fencegate's async journal left: replayed into the
  // database (their tokens only go up), flushed, then deleted.
  uint64_t last_index = 0;
  if (Status s = rocksdb_support::ReplayJournal(db.get(), fs.get(), options.path, &last_index);
      !s.ok()) {
    return s;
  }
  result->reset(new RocksDbStore(options, std::move(db)));
  return Status::Ok();
}

RocksDbStore::RocksDbStore(const RocksDbStoreOptions& options, std::unique_ptr<rocksdb::DB> db)
    : options_(options),
      db_(std::move(db)),
      decide_on_caller_(options.decide_on_caller &&
                        options.durability == Durability::kAsync),
      free_space_(std::make_unique<rocksdb_support::FreeSpaceGuard>(options.path)),
      changes_(std::make_unique<rocksdb::WriteBatch>()) {
  writer_ = std::thread([this] { WriterLoop(); });
  reader_ = std::thread([this] { ReaderLoop(); });
  writer_id_ = writer_.get_id();
  reader_id_ = reader_.get_id();
}

RocksDbStore::~RocksDbStore() {
  Status s = RocksDbStore::Close();  // qualified: no virtual dispatch in a destructor
  (void)s;  // nobody to report to; Close() already answered every handler
}

void RocksDbStore::Advance(std::string key, uint64_t token,
                           FenceHandler handler) {
  Enqueue(/*raise=*/false, std::move(key), token, std::move(handler));
}

void RocksDbStore::AdvanceAll(std::vector<KeyToken> items, BatchFenceHandler handler) {
  Enqueue(/*raise=*/false, {}, 0, {},
          std::make_unique<BatchRequest>(BatchRequest{std::move(items), std::move(handler)}));
}

void RocksDbStore::Raise(std::string key, uint64_t token,
                         FenceHandler handler) {
  Enqueue(/*raise=*/true, std::move(key), token, std::move(handler));
}

void RocksDbStore::Answer(WriteRequest& r, Outcome& o) {
  if (r.batch) return r.batch->handler(o.status, std::move(o.batch));
  r.handler(o.status, o.fence);
}

void RocksDbStore::Enqueue(bool raise, std::string key, uint64_t token, FenceHandler handler,
                           std::unique_ptr<BatchRequest> batch) {
  Status rejected;
  if (batch) {
    rejected = CheckBatchItems(batch->items, kMaxKeyBytes);
  } else if (key.size() > kMaxKeyBytes) {
    rejected = Status::InvalidArgument("key is " + std::to_string(key.size()) +
                                       " bytes, the limit is 1024");
  }
  if (rejected.ok()) {
    std::unique_lock<std::mutex> lock(mu_);
    if (closing_) {
      rejected = Status::Unavailable("token store is closed");
    } else if (decide_on_caller_ && write_queue_.empty() && !lane_busy_ && !failed_) {
      // Async durability and nobody deciding: decide on this thread.
      lane_busy_ = true;
      lock.unlock();
      DecideOnCaller(
          WriteRequest{raise, std::move(key), token, std::move(handler), std::move(batch)});
      return;
    } else if (write_queue_.size() >= options_.max_queued) {
      rejected = Status::Unavailable("token store write queue is full (" +
                                     std::to_string(write_queue_.size()) +
                                     " pending)");
    } else {
      write_queue_.push_back(
          WriteRequest{raise, std::move(key), token, std::move(handler), std::move(batch)});
      // Whoever holds the lane sees the queue when it lets go: the writer
      // loops, a caller takes it over or wakes the writer. Only an idle
      // writer needs waking.
      const bool wake = !lane_busy_;
      lock.unlock();
      if (wake) writer_cv_.notify_one();
      return;
    }
  }
  if (batch) return batch->handler(rejected, BatchFence{});
  handler(rejected, Fence{});
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
    write_queue_.push_front(std::move(request));
  } else if (!write_queue_.empty() && !failed_) {
    // Others queued while this thread decided (they found the lane busy):
    // take one batch of theirs too, rather than wake the writer for it. A
    // batch that would wait for the disk goes back, in order, to the writer.
    std::vector<WriteRequest> batch;
    const size_t n = std::min(options_.max_batch, write_queue_.size());
    batch.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      batch.push_back(std::move(write_queue_.front()));
      write_queue_.pop_front();
    }
    lock.unlock();
    std::vector<Outcome> outcomes(batch.size());
    const bool taken = Decide(batch, /*from_caller=*/true, outcomes);
    if (taken) {
      caller_decided_.fetch_add(batch.size(), std::memory_order_relaxed);
      for (size_t i = 0; i < batch.size(); ++i) Answer(batch[i], outcomes[i]);
    }
    lock.lock();
    if (!taken) {
      for (auto it = batch.rbegin(); it != batch.rend(); ++it) {
        write_queue_.push_front(std::move(*it));
      }
    }
  }
  const bool wake = LaneReleasedLocked();
  lock.unlock();
  if (wake) writer_cv_.notify_one();
}

bool RocksDbStore::LaneReleasedLocked() {
  lane_busy_ = false;
  // Not while a write failed: the writer recovers first (FlushIfDue would
  // do nothing, and a flush due would keep waking it before its recovery
  // timer ran out); the next release after the recovery sets it.
  if (wal_bytes_ >= options_.wal_bytes_per_flush && !failed_) flush_due_ = true;
  return !write_queue_.empty() || closing_ || failed_ || flush_due_;
}

void RocksDbStore::Get(std::string key, GetHandler handler) {
  Status rejected;
  if (key.size() > kMaxKeyBytes) {
    rejected = Status::InvalidArgument("key is " + std::to_string(key.size()) +
                                       " bytes, the limit is 1024");
  } else {
    std::unique_lock<std::mutex> lock(mu_);
    if (closing_) {
      rejected = Status::Unavailable("token store is closed");
    } else if (read_queue_.size() >= options_.max_queued) {
      rejected = Status::Unavailable("token store read queue is full (" +
                                     std::to_string(read_queue_.size()) +
                                     " pending)");
    } else {
      read_queue_.push_back(ReadRequest{std::move(key), std::move(handler)});
      lock.unlock();
      reader_cv_.notify_one();
      return;
    }
  }
  handler(rejected, std::nullopt);
}

Status RocksDbStore::Health() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (closing_) return Status::Unavailable("token store is closed");
  return health_;
}

void RocksDbStore::SetHealth(Status status) {
  std::lock_guard<std::mutex> lock(mu_);
  health_ = std::move(status);
}

StoreStats RocksDbStore::stats() const {
  StoreStats s;
  s.requests = requests_.load(std::memory_order_relaxed);
  s.batches = batches_.load(std::memory_order_relaxed);
  s.writes = writes_.load(std::memory_order_relaxed);
  s.db_writes = db_writes_.load(std::memory_order_relaxed);
  s.syncs = syncs_.load(std::memory_order_relaxed);
  s.write_errors = write_errors_.load(std::memory_order_relaxed);
  s.reopens = reopens_.load(std::memory_order_relaxed);
  s.caller_decided = caller_decided_.load(std::memory_order_relaxed);
  s.flushes = flushes_.load(std::memory_order_relaxed);
  return s;
}

uint64_t RocksDbStore::MemtableEntries() {
  std::shared_lock<std::shared_mutex> lock(db_mu_);
  uint64_t n = 0;
  if (db_ == nullptr ||
      !db_->GetIntProperty(rocksdb::DB::Properties::kNumEntriesActiveMemTable, &n)) {
    return 0;
  }
  return n;
}

Status RocksDbStore::ReadToken(const std::string& key, bool* present,
                               uint64_t* value, bool cache_only, bool on_lane) const {
  rocksdb::PinnableSlice raw;
  rocksdb::Status s;
  rocksdb::ReadOptions ro;
  if (cache_only) ro.read_tier = rocksdb::kBlockCacheTier;
  {
    // A lane holder skips the lock: both I/O threads decide in turn, and a
    // shared lock's count is one more cache line passed between them on
    // every fenced write.
    std::shared_lock<std::shared_mutex> lock(db_mu_, std::defer_lock);
    if (!on_lane) lock.lock();
    if (db_ == nullptr) {
      return Status::IoError("token store is reopening after a write error");
    }
    s = db_->Get(ro, db_->DefaultColumnFamily(), key, &raw);
  }
  if (s.IsIncomplete() && cache_only) return Status::Busy("not cached");
  if (s.IsNotFound()) {
    *present = false;
    return Status::Ok();
  }
  if (!s.ok()) return FromRocks(s, "reading key '" + Printable(key) + "'");
  if (raw.size() != kTokenBytes) {
    return Status::Corruption("stored token for key '" + Printable(key) +
                              "' is " + std::to_string(raw.size()) +
                              " bytes, expected 8");
  }
  *present = true;
  *value = DecodeToken(std::string_view(raw.data(), raw.size()));
  return Status::Ok();
}

Status RocksDbStore::ForEach(const Visitor& visit) {
  std::shared_lock<std::shared_mutex> lock(db_mu_);
  if (db_ == nullptr) {
    return Status::Unavailable("token store is closed or reopening");
  }
  rocksdb::ReadOptions ro;
  ro.verify_checksums = true;
  ro.fill_cache = false;  // a full scan would only evict the hot keys
  ro.total_order_seek = true;  // a hash memtable iterates in order only when asked
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    std::string key = it->key().ToString();
    rocksdb::Slice raw = it->value();
    if (raw.size() != kTokenBytes) {
      return Status::Corruption("stored token for key '" + Printable(key) +
                                "' is " + std::to_string(raw.size()) +
                                " bytes, expected 8");
    }
    if (!visit(key, DecodeToken(std::string_view(raw.data(), raw.size())))) {
      return Status::Ok();
    }
  }
  return FromRocks(it->status(), "scanning the token store");
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
      auto ready = [this] {
        return !lane_busy_ && (closing_ || !write_queue_.empty() || flush_due_);
      };
      for (;;) {
        if (failed_) {
          if (writer_cv_.wait_for(lock, options_.recovery_interval, ready)) {
            break;
          }
          if (!lane_busy_) {  // idle after a failed write: try to recover
            recover = true;
            break;
          }
        } else {
          // A caller's failed write sets failed_: then wait for the timer.
          writer_cv_.wait(lock, [&] { return ready() || failed_; });
          if (ready()) break;
        }
      }
      if (!recover) {
        if (write_queue_.empty() && closing_) return;  // all answered
        size_t n = std::min(options_.max_batch, write_queue_.size());
        for (size_t i = 0; i < n; ++i) {
          batch.push_back(std::move(write_queue_.front()));
          write_queue_.pop_front();
        }
      }
      lane_busy_ = true;
      flush_due_ = false;
    }
    if (recover) {
      if (Status s = Recover(/*probe=*/true); s.ok()) {
        failed_ = false;
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

void RocksDbStore::FlushIfDue() {
  if (wal_bytes_ < options_.wal_bytes_per_flush || failed_) return;
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

Status RocksDbStore::Recover(bool probe) {
  if (Status s = rocksdb_support::CheckFreeSpace(options_); !s.ok()) return s;
  rocksdb::Status resumed = db_ ? db_->Resume() : rocksdb::Status::Aborted();
  if (!resumed.ok()) {
    // Not resumable (a fatal error such as EIO on the WAL), or the database
    // is already gone: reopen it, which replays the WAL. Not before the disk
    // takes writes again, so that reads keep working meanwhile.
    if (Status s = rocksdb_support::ProbeDisk(options_); !s.ok()) return s;
    std::unique_lock<std::shared_mutex> lock(db_mu_);
    if (db_ != nullptr) {
      rocksdb::Status closed = db_->Close();
      (void)closed;  // a broken database may not close cleanly; free it
      db_.reset();
    }
    std::unique_ptr<rocksdb::DB> db;
    if (Status s = rocksdb_support::OpenDb(options_, &db); !s.ok()) return s;
    db_ = std::move(db);
    reopens_.fetch_add(1, std::memory_order_relaxed);
  }
  if (!probe) return Status::Ok();
  // Proves the disk writes again.
  return FromRocks(SyncWal(db_.get()), "token store write failed");
}

void RocksDbStore::CommitBatch(std::vector<WriteRequest>& batch) {
  std::vector<Outcome> outcomes(batch.size());
  Decide(batch, /*from_caller=*/false, outcomes);
  // Every change of the batch is committed (or none is): answer in order.
  for (size_t i = 0; i < batch.size(); ++i) Answer(batch[i], outcomes[i]);
}

bool RocksDbStore::Decide(std::span<WriteRequest> batch, bool from_caller,
                          std::span<Outcome> outcomes) {
  if (failed_) {  // never from_caller: Enqueue checks failed_ first
    Status s = Recover(/*probe=*/false);
    if (!s.ok()) {
      SetHealth(s);
      for (Outcome& o : outcomes) o.status = s;
      batches_.fetch_add(1, std::memory_order_relaxed);
      requests_.fetch_add(batch.size(), std::memory_order_relaxed);
      return true;
    }
  }
  struct Known {
    bool present = false;
    uint64_t value = 0;
  };
  // Value of each key as of the requests decided so far in this batch. The
  // views point into batch, which does not change until the handlers ran.
  // A batch of one never looks a key up twice and needs no map (an
  // AdvanceAll's keys are distinct).
  std::unordered_map<std::string_view, Known> known;
  const bool remember = batch.size() > 1;
  rocksdb::WriteBatch& changes = *changes_;
  changes.Clear();  // keeps its buffer
  // A key's value as of the requests decided so far: this batch's, then
  // RocksDB's. Busy from_caller: a file to read.
  auto look_up = [&](const std::string& key, Known* k) -> Status {
    if (auto it = known.find(key); it != known.end()) {
      *k = it->second;
    } else {
      return ReadToken(key, &k->present, &k->value, from_caller, /*on_lane=*/true);
    }
    return Status::Ok();
  };

  for (size_t i = 0; i < batch.size(); ++i) {
    WriteRequest& r = batch[i];
    if (r.batch) {
      // AdvanceAll: decided whole, like one request, or refused whole.
      std::vector<KeyToken>& items = r.batch->items;
      boost::container::small_vector<Known, 4> ks(items.size());
      Status read;
      for (size_t j = 0; j < items.size() && read.ok(); ++j) read = look_up(items[j].key, &ks[j]);
      if (!read.ok()) {
        if (from_caller && read.code() == Status::Code::kBusy) return false;
        outcomes[i].status = std::move(read);
        continue;
      }
      BatchFence& f = outcomes[i].batch;
      f.current.resize(items.size());
      for (size_t j = 0; j < items.size(); ++j) {
        if (ks[j].present && items[j].token < ks[j].value && f.stale == SIZE_MAX) f.stale = j;
      }
      if (f.stale != SIZE_MAX) {
        for (size_t j = 0; j < items.size(); ++j) {
          f.current[j] = ks[j].present ? ks[j].value : 0;
          if (remember) known[items[j].key] = ks[j];
        }
        continue;
      }
      // Every item or none: a Put that fails takes back those before it.
      changes.SetSavePoint();
      Status put;
      for (size_t j = 0; j < items.size() && put.ok(); ++j) {
        f.current[j] = ks[j].present ? std::max(ks[j].value, items[j].token) : items[j].token;
        if (ks[j].present && f.current[j] == ks[j].value) continue;
        if (rocksdb::Status p = changes.Put(items[j].key, EncodeToken(f.current[j])); !p.ok()) {
          put = FromRocks(p, "building write batch");
        }
      }
      if (!put.ok()) {
        (void)changes.RollbackToSavePoint();
        outcomes[i] = Outcome{std::move(put), Fence{}, BatchFence{}};
        continue;
      }
      (void)changes.PopSavePoint();
      if (remember) {
        for (size_t j = 0; j < items.size(); ++j) known[items[j].key] = Known{true, f.current[j]};
      }
      f.accepted = true;
      continue;
    }
    Known k;
    if (Status s = look_up(r.key, &k); !s.ok()) {
      if (from_caller && s.code() == Status::Code::kBusy) {
        return false;  // the read would wait for the disk: nothing decided
      }
      outcomes[i].status = std::move(s);  // e.g. Corruption: never overwrite
      continue;
    }
    if (!r.raise && k.present && r.token < k.value) {
      outcomes[i].fence = Fence{false, k.value};
      if (remember) known[r.key] = k;
      continue;
    }
    uint64_t next = k.present ? std::max(k.value, r.token) : r.token;
    if (!k.present || next != k.value) {
      rocksdb::Status put = changes.Put(r.key, EncodeToken(next));
      if (!put.ok()) {
        outcomes[i].status = FromRocks(put, "building write batch");
        continue;
      }
    }
    if (remember) known[r.key] = Known{true, next};
    outcomes[i].fence = Fence{true, next};
  }

  Status failed;
  if (changes.Count() > 0) failed = free_space_->Check(changes.GetDataSize());
  if (!failed.ok()) {
    write_errors_.fetch_add(1, std::memory_order_relaxed);
    failed_ = true;
    SetHealth(failed);
  } else if (changes.Count() > 0) {
    rocksdb::WriteOptions wo;
    wo.sync = options_.durability == Durability::kSync;
    // The caller's thread never waits for a write stall (RocksDB answers
    // Incomplete and writes nothing); the writer thread does.
    wo.no_slowdown = from_caller;
    // Under kAsync the WAL record is in the page cache (write(2)) when
    // Write returns: a killed process loses nothing acknowledged.
    rocksdb::Status s = db_->Write(wo, &changes);
    if (from_caller && s.IsIncomplete()) return false;
    db_writes_.fetch_add(1, std::memory_order_relaxed);
    if (s.ok()) {
      wal_bytes_ += changes.GetDataSize();
      writes_.fetch_add(changes.Count(), std::memory_order_relaxed);
      if (wo.sync) syncs_.fetch_add(1, std::memory_order_relaxed);
      if (failed_) {
        failed_ = false;
        SetHealth(Status::Ok());
      }
    } else {
      write_errors_.fetch_add(1, std::memory_order_relaxed);
      free_space_->Forget();  // the disk may be why: ask it before the next write
      failed = FromRocks(s, "token store write failed");
      failed_ = true;
      SetHealth(failed);
    }
  }
  if (!failed.ok()) {
    for (Outcome& o : outcomes) o = Outcome{failed, Fence{}, BatchFence{}};
  }
  // A batch of big keys does not keep its buffer for the writes after it.
  if (changes.GetDataSize() > kKeptBatchBytes) changes_ = std::make_unique<rocksdb::WriteBatch>();
  batches_.fetch_add(1, std::memory_order_relaxed);
  requests_.fetch_add(batch.size(), std::memory_order_relaxed);
  return true;
}

void RocksDbStore::ReaderLoop() {
  std::deque<ReadRequest> pending;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      reader_cv_.wait(lock,
                      [this] { return closing_ || !read_queue_.empty(); });
      if (read_queue_.empty()) return;  // closing, and everything answered
      pending.swap(read_queue_);
    }
    for (ReadRequest& r : pending) {
      bool present = false;
      uint64_t value = 0;
      Status s = ReadToken(r.key, &present, &value, /*cache_only=*/false, /*on_lane=*/false);
      if (!s.ok()) {
        r.handler(s, std::nullopt);
      } else {
        r.handler(s, present ? std::optional<uint64_t>(value) : std::nullopt);
      }
    }
    pending.clear();
  }
}

Status RocksDbStore::Close() {
  std::thread::id self = std::this_thread::get_id();
  if (self == writer_id_ || self == reader_id_) {
    return Status::InvalidArgument(
        "Close() called from a token store handler; call it from another "
        "thread");
  }
  std::lock_guard<std::mutex> close_lock(close_mu_);
  if (closed_) return close_status_;
  {
    std::lock_guard<std::mutex> lock(mu_);
    closing_ = true;
  }
  writer_cv_.notify_all();
  reader_cv_.notify_all();
  writer_.join();  // answers every queued Advance/Raise first
  reader_.join();  // answers every queued Get first

  Status status;
  if (failed_ || db_ == nullptr) {
    // The WAL is broken (syncing it again could only fail); every write
    // that was acknowledged is already as durable as the durability allows.
    std::lock_guard<std::mutex> lock(mu_);
    status = health_;
  } else if (options_.durability == Durability::kAsync) {
    // Under kAsync the newest WAL records may be in the page cache only
    // (under kSync every batch was synced before it was answered): a clean
    // stop leaves nothing a power loss could take.
    status = FromRocks(db_->SyncWAL(), "syncing the token store's WAL at close");
  }
  if (db_ != nullptr) {
    Status closed = FromRocks(db_->Close(), "closing the token store");
    if (status.ok()) status = closed;
    std::unique_lock<std::shared_mutex> lock(db_mu_);
    db_.reset();
  }
  closed_ = true;
  close_status_ = status;
  return status;
}

}  // namespace fencegate::storage
