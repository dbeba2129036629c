#pragma once
// RocksDbStore: the embedded TokenStore engine (storage.engine: rocksdb).
//
// Layout on disk: one RocksDB database in options.path; key = the fence key
// bytes (at most kMaxKeyBytes), value = the token as 8 bytes big-endian. A
// value of any other size is reported as Corruption, never read as 0.
//
// Threads. The store owns two threads:
//  - the writer thread owns every mutation. Advance/Raise/AdvanceAll enqueue
//    a request and return at once; the writer drains up to max_batch queued
//    requests, decides each one in queue order (a key changed earlier in
//    the same batch is judged against the batch's pending value), commits
//    all accepted changes with ONE rocksdb::WriteBatch and ONE DB::Write
//    (with WriteOptions.sync under Durability::kSync: group commit, so
//    concurrent advances share one fsync), and only after that Write
//    returns invokes the handlers of the whole batch, in queue order.
//    Because one thread decides all mutations, Advance is atomic per key
//    without locks.
//  - the reader thread serves Get, so a read never waits behind an fsync
//    and never blocks the caller. A Get sees every Advance/Raise whose
//    handler has run (and possibly ones whose fsync finished but whose
//    handler has not run yet).
//  - under Durability::kAsync only (decide_on_caller): an Advance/Raise made
//    while nothing is queued and nobody else is deciding is decided and
//    committed on the caller's thread, and its handler runs there before
//    the call returns (before the next request is decided, as the writer's
//    handlers do: all handlers run in the order of the decisions). It saves
//    the two thread hand-offs (writer wake-up, and the caller's own wake-up
//    for the answer) that cost a fenced write more than RocksDB's work
//    does. It never waits for the disk: it reads RocksDB's memtable and
//    block cache only (ReadOptions::read_tier = kBlockCacheTier) and writes
//    with WriteOptions::no_slowdown; if the key is not cached or the write
//    would stall, it decides and writes nothing and queues the request for
//    the writer, ahead of anything queued meanwhile. One holder at a time
//    (the "lane") decides, so call order is kept exactly as with the
//    writer alone. Requests made while a caller decides queue, and that
//    caller then decides one batch of them too (under the same rules), so
//    that under load the writer thread is not woken for them. Under kSync
//    every request goes through the writer (group commit).
//
// Durability. Every batch goes to RocksDB's WAL: under kSync with
// WriteOptions::sync (one fsync per batch, before any handler runs); under
// kAsync without it: RocksDB appends the record to its WAL file with
// write(2) before DB::Write returns, so it is in the page cache before the
// write is answered and a killed process loses nothing acknowledged, while
// a power loss loses what the kernel had not yet written back (Linux writes
// dirty pages back within vm.dirty_expire_centisecs, 30 s by default). A
// RocksDB WAL is appended with write(2) and cut only from its end, so a
// crash leaves at worst one incomplete record at the tail, which recovery
// drops (kTolerateCorruptedTailRecords); a power loss may also leave that
// record torn (zeros in its end, in the WAL or the MANIFEST), which Open
// cuts off before RocksDB reads the files (log_tail.h). Every wal_bytes_per_flush bytes of
// WAL the writer thread switches the memtable, so that RocksDB can drop
// the WAL files it no longer needs. Open replays the WAL (RocksDB does), and
// once replays what a journal of an earlier fencegate left (journal.h).
//
// Disk space. Before each write the writer checks that the data dir's file
// system has rocksdb_support::kMinFreeBytes (4 MiB) free; below that the
// batch fails as if DB::Write had failed (IoError, see below), so a full
// disk fails closed before RocksDB's WAL append hits ENOSPC (which Debian's
// librocksdb 7.8 answers with an assertion abort). Far from that floor the
// check does not ask the file system before every write (statvfs costs
// about 2 us, a sixth to a tenth of what fencing adds to a write): see
// FreeSpaceGuard.
//
// Failure. If DB::Write fails, every handler of the batch gets the error
// (no request of the batch is accepted) and Health() reports it until a
// write succeeds again. The writer then recovers on its own, without a restart,
// once the disk does: before the next batch, and every recovery_interval
// while idle (so Health() turns ok again even when no traffic arrives, for
// example while a readiness probe keeps traffic away), it calls
// DB::Resume(); if RocksDB reports the error as not resumable (a fatal WAL
// I/O error) it closes and reopens the database, replaying the WAL. While
// idle it confirms recovery with an empty synced write. Until recovery
// succeeds every write request answers the error (fail closed). A batch
// whose write failed may still reach the disk (the WAL record was written,
// its fsync failed) and show up after a reopen: never acknowledged, and
// harmless, since stored tokens only go up.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "storage/token_store.h"

namespace rocksdb {
class DB;
class Env;
class FileSystem;
class WriteBatch;
}  // namespace rocksdb

namespace fencegate::storage {

namespace rocksdb_support {
class FreeSpaceGuard;
}  // namespace rocksdb_support

struct RocksDbStoreOptions {
  std::string path = "./fencegate-data";      // the data directory
  Durability durability = Durability::kSync;  // kSync: fsync WAL per batch
  size_t max_batch = 1024;    // most requests decided per DB::Write
  size_t max_queued = 65536;  // Advance/Raise/Get beyond this answer Unavailable
  // While the last write failed and no requests arrive, how often the writer
  // tries to recover.
  std::chrono::milliseconds recovery_interval{1000};
  rocksdb::Env* env = nullptr;  // tests inject faults here; nullptr = default
  // Under kAsync, an Advance/Raise made while the writer is idle is decided
  // and committed on the caller's thread (see "Threads" above). Tests turn
  // it off to drive the writer thread alone.
  bool decide_on_caller = true;
  // The memtable takes rewrites of a key in place (rocksdb_support.cc), so
  // one holding few keys never fills and RocksDB would never flush it nor
  // drop a WAL file: the WAL, all of which a start replays, would grow with
  // every write. After about this many bytes of WAL since the last flush
  // the writer thread switches the memtable (flushed in the background).
  size_t wal_bytes_per_flush = 16u << 20;
  // The memtable is a hash of linked lists with this many buckets, keyed
  // by the whole key (rocksdb_support.cc), instead of RocksDB's default
  // skiplist: a fenced write's Get and in-place Put each find the key by
  // its hash. 0 = the skiplist.
  size_t memtable_buckets = 1u << 16;
};

// Counters for benchmarks and tests; each is monotonic since Open.
struct StoreStats {
  uint64_t requests = 0;      // Advance/AdvanceAll/Raise requests decided
  uint64_t batches = 0;       // writer batches (one per drain of the queue)
  uint64_t writes = 0;        // key records written (accepted changes)
  uint64_t db_writes = 0;      // DB::Write calls: at most one per batch
  uint64_t syncs = 0;         // DB::Write calls with sync=true that succeeded
  uint64_t write_errors = 0;  // DB::Write calls that failed
  uint64_t reopens = 0;       // database reopened to recover from an error
  uint64_t caller_decided = 0;  // requests decided on the caller's thread
  uint64_t flushes = 0;  // memtable flushes asked for by wal_bytes_per_flush
};

class RocksDbStore : public TokenStore {
 public:
  // Longest key accepted; longer keys answer InvalidArgument immediately.
  static constexpr size_t kMaxKeyBytes = 1024;

  // Opens (creating if missing) the database in options.path and starts the
  // writer and reader threads. On success stores the engine in *result and
  // returns ok. On failure *result is untouched and the Status says what to
  // do: Busy when another process (or another store in this process) holds
  // the data dir lock; Corruption when the directory holds damaged or partial
  // RocksDB files (the store never creates an empty database over them);
  // IoError for unreadable or unwritable paths.
  static Status Open(const RocksDbStoreOptions& options,
                     std::unique_ptr<RocksDbStore>* result);

  // Calls Close(); its Status is dropped (there is no one left to tell).
  ~RocksDbStore() override;

  RocksDbStore(const RocksDbStore&) = delete;
  RocksDbStore& operator=(const RocksDbStore&) = delete;

  // See token_store.h. The handler runs on the writer thread after the
  // batch holding this request is committed (fsynced under kSync), or on
  // the caller's thread (decide_on_caller, see "Threads").
  void Advance(std::string key, uint64_t token, FenceHandler handler) override;

  // See token_store.h. Same thread and durability as Advance: one request
  // of the writer's queue (or one decision on the caller's thread), decided
  // against the values of the requests before it in the same batch, its
  // changes in the batch's one WriteBatch. On the caller's thread every
  // item's key must be in RocksDB's memtable or block cache, else the
  // writer decides it.
  void AdvanceAll(std::vector<KeyToken> items, BatchFenceHandler handler) override;

  // See token_store.h. Same thread and durability as Advance.
  void Raise(std::string key, uint64_t token, FenceHandler handler) override;

  // See token_store.h. The handler runs on the reader thread. A stored value
  // that is not 8 bytes reports Corruption.
  void Get(std::string key, GetHandler handler) override;

  // Ok while open and the last DB::Write succeeded; the write error after a
  // failed write; Unavailable after Close(). Never does I/O.
  Status Health() const override;

  // Stops accepting requests (later calls answer Unavailable at once), lets
  // the writer and reader answer everything already queued, syncs the WAL
  // and closes the database, releasing the data dir lock. Idempotent and
  // thread-safe; a second call returns the first call's Status. Must not be
  // called from a store handler (returns InvalidArgument if it is).
  Status Close() override;

  // A snapshot of the counters. Thread-safe, never blocks on I/O.
  StoreStats stats() const;

  // Entries in the memtable being filled (RocksDB's
  // rocksdb.num-entries-active-mem-table): one per key written since the
  // last switch when rewrites take the key's place. 0 while closed. For
  // tests and benchmarks; thread-safe.
  uint64_t MemtableEntries();

  // Calls visit(key, token) for every stored key, in byte order of the keys,
  // from a consistent snapshot of the database; stops early (still ok) when
  // visit returns false. Runs on the caller's thread and BLOCKS on disk
  // reads: meant for offline tools (fencegate export), never for an I/O thread or a
  // store handler. Thread-safe. A stored value that is not 8 bytes stops
  // the scan with Corruption; an I/O error stops it with that error.
  using Visitor = std::function<bool(const std::string& key, uint64_t token)>;
  Status ForEach(const Visitor& visit);

 private:
  // An AdvanceAll's items and handler, apart so that an Advance's request
  // stays as small as before (a null pointer).
  struct BatchRequest {
    std::vector<KeyToken> items;
    BatchFenceHandler handler;
  };
  struct WriteRequest {
    bool raise = false;  // Raise (never refuses) instead of Advance
    std::string key;
    uint64_t token = 0;
    FenceHandler handler;
    std::unique_ptr<BatchRequest> batch;  // AdvanceAll: key, token, handler unused
  };
  struct Outcome {
    Status status;
    Fence fence;
    BatchFence batch;  // AdvanceAll's
  };
  // Runs r's handler (Advance/Raise or AdvanceAll) with its outcome.
  static void Answer(WriteRequest& r, Outcome& o);
  struct ReadRequest {
    std::string key;
    GetHandler handler;
  };

  RocksDbStore(const RocksDbStoreOptions& options, std::unique_ptr<rocksdb::DB> db);

  // batch: an AdvanceAll (key, token and handler are then empty).
  void Enqueue(bool raise, std::string key, uint64_t token, FenceHandler handler,
               std::unique_ptr<BatchRequest> batch = nullptr);
  // Holding the lane, on the caller's thread: decides `request` (or queues
  // it for the writer), then at most one batch that others queued
  // meanwhile, then lets go of the lane.
  void DecideOnCaller(WriteRequest request);
  void WriterLoop();
  void ReaderLoop();
  // Decides, commits and answers one batch (writer thread only).
  void CommitBatch(std::vector<WriteRequest>& batch);
  // Decides every request of the batch in order and commits the accepted
  // changes with one DB::Write; fills outcomes (same size as batch), answers
  // nobody. Only while holding the lane (lane_busy_). from_caller (on a
  // caller's thread): never waits for the disk; returns false, having
  // decided and written nothing, when a key is not in RocksDB's memtable or
  // block cache or the write would stall. Otherwise true.
  bool Decide(std::span<WriteRequest> batch, bool from_caller,
              std::span<Outcome> outcomes);
  // Writer thread, after a failed write: brings the database back to
  // read-write (Resume, else reopen). With probe, confirms with an empty
  // synced write. Ok when writes can be tried again.
  Status Recover(bool probe);
  // Reads key from the database: ok with *present/*value, or an error.
  // cache_only: Busy instead of reading a file. on_lane: the caller holds
  // the lane (Decide), so db_ cannot change under it and db_mu_ is not
  // taken; otherwise (the reader thread) a shared lock is.
  Status ReadToken(const std::string& key, bool* present, uint64_t* value,
                   bool cache_only, bool on_lane) const;
  void SetHealth(Status status);
  // Under mu_, as the lane is let go: wakes whoever must run next.
  // Returns whether the writer must be woken (the caller notifies it after
  // unlocking).
  bool LaneReleasedLocked();
  // Holding the lane, on the writer thread: switches the memtable when
  // wal_bytes_per_flush bytes went to the WAL since the last switch.
  void FlushIfDue();

  const RocksDbStoreOptions options_;

  // DB methods are thread-safe; the pointer itself changes only while the
  // lane is held (the writer's reopen during recovery) and in Close() after
  // the writer has stopped, under an exclusive lock. The reader thread
  // holds a shared lock while it uses it; a lane holder (the writer, or a
  // caller deciding) reads it without one: no one else can change it then,
  // and the lane is handed over under mu_. Null while a reopen has failed.
  mutable std::shared_mutex db_mu_;
  std::unique_ptr<rocksdb::DB> db_;  // guarded by db_mu_ (see above)

  mutable std::mutex mu_;
  std::condition_variable writer_cv_;
  std::condition_variable reader_cv_;
  std::deque<WriteRequest> write_queue_;  // guarded by mu_
  std::deque<ReadRequest> read_queue_;    // guarded by mu_
  bool closing_ = false;                  // guarded by mu_; no new requests
  // The lane: the right to decide and commit (and to recover). Held by the
  // writer thread for a batch or a recovery, or by a caller deciding its own
  // request (decide_on_caller); one holder at a time, so Advance/Raise stay
  // decided in call order and db_ changes under one owner.
  bool lane_busy_ = false;                // guarded by mu_
  const bool decide_on_caller_;  // decide_on_caller under kAsync
  // A caller's write passed wal_bytes_per_flush: the writer flushes.
  bool flush_due_ = false;                // guarded by mu_
  Status health_;                         // guarded by mu_

  std::mutex close_mu_;   // serialises Close()
  bool closed_ = false;   // guarded by close_mu_
  Status close_status_;   // guarded by close_mu_

  // Written only by the lane's holder; read by Enqueue to choose the lane.
  std::atomic<bool> failed_{false};  // the last write failed; recover first
  // The free-space check before each write; used only by the lane's holder.
  std::unique_ptr<rocksdb_support::FreeSpaceGuard> free_space_;
  // Bytes written to the WAL since the last memtable switch; lane only.
  uint64_t wal_bytes_ = 0;
  // The batch Decide fills, kept between batches so that its buffer is
  // not allocated (and grown) again for every write; lane only.
  std::unique_ptr<rocksdb::WriteBatch> changes_;

  std::atomic<uint64_t> requests_{0};
  std::atomic<uint64_t> batches_{0};
  std::atomic<uint64_t> writes_{0};
  std::atomic<uint64_t> db_writes_{0};
  std::atomic<uint64_t> syncs_{0};
  std::atomic<uint64_t> write_errors_{0};
  std::atomic<uint64_t> reopens_{0};
  std::atomic<uint64_t> caller_decided_{0};
  std::atomic<uint64_t> flushes_{0};

  std::thread writer_;  // started last, joined in Close()
  std::thread reader_;
  std::thread::id writer_id_;  // set once in the constructor
  std::thread::id reader_id_;  // set once in the constructor
};

}  // namespace fencegate::storage
