#pragma once
// RocksDbStore: the embedded TokenStore engine (storage.engine: rocksdb).
//
// One RocksDB database in options.path: key = the fence key's bytes (at
// most kMaxKeyBytes), value = the token as 8 bytes big-endian; a value of
// any other size is reported as Corruption, never read as 0. The store owns
// two threads: the writer decides and commits mutations (one batch, one
// DB::Write, one fsync under kSync: group commit), the reader serves Get.
// Under kAsync a caller may decide its own request on its thread. How the
// lane, durability, disk space and recovery work: docs/architecture.md,
// "The token store".
//
// Its parts: rocksdb_store.cc (this interface, the reader thread),
// rocksdb_writer.{h,cc} (the lane and the writer thread), rocksdb_decide.cc
// (check-and-advance of a batch), rocksdb_recovery.cc (opening and
// recovering the database), rocksdb_options.cc (RocksDB's options),
// rocksdb_support.h (the token format, status conversion, free space).

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

#include "storage/idempotency_store.h"
#include "storage/rocksdb_writer.h"
#include "storage/token_store.h"

namespace rocksdb {
class DB;
class Env;
class WriteBatch;
}  // namespace rocksdb

namespace fencegate::storage {

namespace rocksdb_support {
class FreeSpaceGuard;
}  // namespace rocksdb_support

struct RocksDbStoreOptions {
  std::string path = "./fencegate-data";      // the data directory
  // kSync: the WAL is fsynced before any handler of a batch runs. kAsync:
  // the WAL record is in the page cache (written with write(2)) before the
  // handler runs, so a killed process loses nothing acknowledged and a
  // power loss may lose what the kernel had not written back yet.
  Durability durability = Durability::kSync;
  size_t max_batch = 1024;    // most requests decided per DB::Write
  size_t max_queued = 65536;  // Advance/Raise/Get beyond this answer Unavailable
  // While the last write failed and no requests arrive, how often the writer
  // tries to recover.
  std::chrono::milliseconds recovery_interval{1000};
  // How often the idempotency records' key range is compacted, when records
  // were written since the last time, so that expired records (dropped by
  // the compaction filter) leave the disk within this of their expiry even
  // when keys only grow (ULIDs, order numbers): RocksDB by itself rewrites
  // files that new keys never overlap only every 30 days. 0 = never.
  std::chrono::milliseconds records_compaction_interval{std::chrono::hours(1)};
  rocksdb::Env* env = nullptr;  // tests inject faults here; nullptr = default
  // Under kAsync, an Advance/Raise made while nothing is queued and nobody
  // decides is decided and committed on the caller's thread, reading only
  // RocksDB's memtable and block cache and never waiting for a write stall
  // (else the writer decides it). Tests turn it off to drive the writer
  // thread alone.
  bool decide_on_caller = true;
  // The memtable takes rewrites of a key in place (rocksdb_options.cc), so
  // one holding few keys never fills and RocksDB would never flush it nor
  // drop a WAL file: the WAL, all of which a start replays, would grow with
  // every write. After about this many bytes of WAL since the last flush
  // the writer thread switches the memtable (flushed in the background).
  size_t wal_bytes_per_flush = 16u << 20;
  // The memtable is a hash of linked lists with this many buckets, keyed
  // by the whole key (rocksdb_options.cc), instead of RocksDB's default
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

class RocksDbStore : public TokenStore, public IdempotencyStore {
 public:
  // Longest key accepted; longer keys answer InvalidArgument immediately.
  static constexpr size_t kMaxKeyBytes = 1024;

  // Opens (creating if missing) the database in options.path, replays what
  // an earlier fencegate's journal left (journal.h), and starts the writer
  // and reader threads. On success stores the engine in *result and
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
  // batch holding this request is committed (fsynced under kSync), after
  // the handlers of the requests decided before it; or, under
  // decide_on_caller, on the caller's thread before Advance returns. A
  // batch whose write fails answers every request of it with the error
  // (none is accepted), and so does every later request until the writer
  // has recovered (fail closed). While the data dir's file system is down
  // to rocksdb_support::kMinFreeBytes free, a batch fails the same way
  // (IoError) without being written.
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

  // See token_store.h. A request of the writer lane like AdvanceAll, its
  // nodes stored under TreeKeyOf(path) in the tokens' database, written in
  // the same WriteBatch as its keys. On the caller's thread every key and
  // node it reads must be cached, as for AdvanceAll.
  void AdvanceTree(TreeWrite write, TreeHandler handler) override;
  // See token_store.h. The reader thread's, like Get.
  void GetNode(std::string path, NodeHandler handler) override;

  // See token_store.h. The handler runs on the reader thread, so a read
  // never waits behind an fsync. It sees every Advance/Raise whose handler
  // has run (and possibly ones committed whose handler has not run yet). A
  // stored value that is not 8 bytes reports Corruption.
  void Get(std::string key, GetHandler handler) override;

  // Idempotency records (idempotency_store.h, rocksdb_records.cc). A
  // record's Reserve, Finish and Release are requests of the writer lane
  // like Advance: same order, batches, durability and failure; a Lookup is
  // the reader thread's, like Get. Token keys may not begin with the
  // records' prefix (kRecordKeyPrefix, token_store.h): InvalidArgument.
  IdempotencyStore* Idempotency() override { return this; }
  void ReserveKey(std::string key, IdempotencyRecord reservation,
                  ReserveHandler handler) override;
  void FinishKey(std::string key, IdempotencyRecord finished, int64_t now_ms,
                 ChangeHandler handler) override;
  void ReleaseKey(std::string key, uint64_t owner, ChangeHandler handler) override;
  void RenewKey(std::string key, uint64_t owner, int64_t expires_ms, int64_t now_ms,
                ChangeHandler handler) override;
  void LookupKey(std::string key, int64_t now_ms, LookupHandler handler) override;

  // Ok while open and the last DB::Write succeeded; the write error after a
  // failed write, until the writer has recovered (it retries every
  // recovery_interval while idle); Unavailable after Close(). Never does I/O.
  Status Health() const override;

  // Stops accepting requests (later calls answer Unavailable at once), lets
  // the writer and reader answer everything already queued, syncs the WAL
  // and closes the database, releasing the data dir lock. Idempotent and
  // thread-safe; a second call returns the first call's Status. Must not be
  // called from a store handler (returns InvalidArgument if it is).
  Status Close() override;

  // A snapshot of the counters. Thread-safe, never blocks on I/O.
  StoreStats stats() const;
  // stats(), in the engines' common terms.
  std::optional<StoreCounters> Counters() const override;
  // Compactions of the records' key range so far (records_compaction_interval).
  uint64_t record_compactions() const { return record_compactions_.load(); }

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

  // Calls visit(path, node) for every node of the tree of paths, in byte
  // order of the paths, as ForEach (a snapshot, blocking, for offline
  // tools). A record that is not a node stops the scan with Corruption.
  using NodeVisitor = std::function<bool(const std::string& path, const TreeNode& node)>;
  Status ForEachNode(const NodeVisitor& visit);

 private:
  using BatchRequest = rocksdb_support::BatchRequest;
  using WriteRequest = rocksdb_support::WriteRequest;
  using Outcome = rocksdb_support::Outcome;
  struct ReadRequest {
    std::string key;
    GetHandler handler;
    // A record's Lookup instead of a Get: key is the stored key.
    LookupHandler lookup;
    int64_t now_ms = 0;
    // A tree node's read instead of a Get: key is the node's path.
    NodeHandler node;
  };
  // Hashes a path's view and its string alike: a view looks an entry up
  // without a copy.
  struct PathHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  // A node as of the requests decided so far in a batch, by path.
  using NodesSeen =
      std::unordered_map<std::string, std::optional<TreeNode>, PathHash, std::equal_to<>>;
  // Decoded nodes as committed, by path (node_cache_).
  using NodeCache = std::unordered_map<std::string, TreeNode, PathHash, std::equal_to<>>;
  // Entries node_cache_ holds at most: it is emptied when a batch finds it
  // fuller (collections that writes go below are far fewer in practice).
  static constexpr size_t kNodeCacheEntries = 4096;
  // A token key's value as of the requests decided so far in a batch; the
  // views point into the batch (see Decide).
  struct KnownToken {
    bool present = false;
    uint64_t value = 0;
  };
  using KnownTokens = std::unordered_map<std::string_view, KnownToken>;
  // A record's bytes as of the requests decided so far in a batch; the
  // views point into the batch (see Decide).
  using RecordsSeen = std::unordered_map<std::string_view, std::optional<std::string>>;

  RocksDbStore(const RocksDbStoreOptions& options, std::unique_ptr<rocksdb::DB> db);

  // batch: an AdvanceAll (key, token and handler are then empty).
  void Enqueue(bool raise, std::string key, uint64_t token, FenceHandler handler,
               std::unique_ptr<BatchRequest> batch = nullptr);
  // Queues a checked request on the lane, or decides it on the caller's
  // thread (decide_on_caller), or answers it Unavailable.
  void Submit(WriteRequest request);
  // Submit for a record's change under the caller's key.
  void SubmitRecord(const std::string& key,
                    std::unique_ptr<rocksdb_support::RecordRequest> record);
  // Queues a read for the reader thread, or answers it Unavailable.
  void SubmitRead(ReadRequest request);
  // Decides a record's change (Decide, holding the lane); Busy from_caller
  // when the record is not cached (nothing decided).
  Status DecideRecord(WriteRequest& r, bool from_caller, RecordsSeen& seen,
                      rocksdb::WriteBatch& changes, Outcome& out);
  // Reads a record's bytes (nullopt: none); cache_only and on_lane as
  // ReadToken's.
  Status ReadRecord(const std::string& stored_key, std::optional<std::string>* bytes,
                    bool cache_only, bool on_lane) const;
  void AnswerLookup(ReadRequest& r);  // reader thread
  // Decides an AdvanceTree (Decide, holding the lane): reads keys through
  // `known` and nodes through `seen` (as of the batch; both updated when
  // `remember`), then node_cache_, then the database; adds the accepted
  // changes to `changes` and to nodes_written_. Busy from_caller when a key
  // or node is not cached (nothing decided).
  Status DecideTreeRequest(WriteRequest& r, bool from_caller, KnownTokens& known,
                           bool remember, NodesSeen& seen, rocksdb::WriteBatch& changes,
                           Outcome& out);
  // Reads the node of `path` (nullopt: none); cache_only and on_lane as
  // ReadToken's. A record that does not decode: Corruption.
  Status ReadNode(const std::string& path, std::optional<TreeNode>* node, bool cache_only,
                  bool on_lane) const;
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
  // nobody. Only while holding the lane (lane_.busy). from_caller (on a
  // caller's thread): never waits for the disk; returns false, having
  // decided and written nothing, when a key is not in RocksDB's memtable or
  // block cache or the write would stall. Otherwise true.
  bool Decide(std::span<WriteRequest> batch, bool from_caller,
              std::span<Outcome> outcomes);
  // Writer thread, after a failed write: once the disk has room above the
  // floor, brings the database back to read-write. A write that RocksDB
  // itself failed is recovered by a reopen, never by DB::Resume: Resume
  // keeps the WAL writer that saw the error, and Debian's librocksdb (its
  // assert() live) aborts the process on that writer's next append or sync.
  // A write the free-space check refused never reached RocksDB: nothing to
  // reopen. With probe, confirms with an empty synced write. Ok when writes
  // can be tried again.
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
  // The write queue and the lane's flags; guarded by mu_, except
  // lane_.failed (see WriteLane).
  rocksdb_support::WriteLane lane_;
  std::deque<ReadRequest> read_queue_;    // guarded by mu_
  const bool decide_on_caller_;  // decide_on_caller under kAsync
  Status health_;                         // guarded by mu_

  std::mutex close_mu_;   // serialises Close()
  bool closed_ = false;   // guarded by close_mu_
  Status close_status_;   // guarded by close_mu_

  // The free-space check before each write; used only by the lane's holder.
  std::unique_ptr<rocksdb_support::FreeSpaceGuard> free_space_;
  // A RocksDB write failed (not only the free-space check): the database
  // is reopened before the next write (Recover); lane only.
  bool db_failed_ = false;
  // Bytes written to the WAL since the last memtable switch; lane only.
  uint64_t wal_bytes_ = 0;
  // The batch Decide fills, kept between batches so that its buffer is
  // not allocated (and grown) again for every write; lane only.
  std::unique_ptr<rocksdb::WriteBatch> changes_;
  // The nodes of the paths that tree writes went below (their targets'
  // ancestors: the root and the collections, read by nearly every write),
  // decoded, as committed: a hit costs no read and no decode. Lane only;
  // updated from nodes_written_ once a batch is written, emptied when a
  // write fails (what the database holds is then not known).
  NodeCache node_cache_;
  // The nodes the batch being decided changes, in order; lane only.
  std::vector<std::pair<std::string, TreeNode>> nodes_written_;
  // A node's key and record as they go into the batch, kept between writes
  // so that neither is allocated for each; lane only.
  std::string node_key_;
  std::string node_bytes_;

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
  // Compacts the records' key range every records_compaction_interval
  // (CompactRecords); stopped in Close().
  void CompactorLoop();
  std::thread compactor_;
  std::condition_variable compactor_cv_;  // with mu_: Close() wakes it
  std::atomic<uint64_t> record_writes_{0};  // records changed, ever
  std::atomic<uint64_t> record_compactions_{0};
  std::thread::id writer_id_;  // set once in the constructor
  std::thread::id reader_id_;  // set once in the constructor
};

}  // namespace fencegate::storage
