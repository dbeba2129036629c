// RocksDbStore: what callers see of the engine (the TokenStore calls,
// health, counters, the offline scan), its reader thread and Close(). The
// write side is in rocksdb_writer.cc and rocksdb_decide.cc, opening and
// recovery in rocksdb_recovery.cc.

#include "storage/rocksdb_store.h"

#include <string_view>
#include <utility>

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include "storage/rocksdb_support.h"

#include <spdlog/spdlog.h>

namespace fencegate::storage {

using rocksdb_support::DecodeToken;
using rocksdb_support::FromRocks;
using rocksdb_support::kTokenBytes;
using rocksdb_support::Printable;
using rocksdb_support::TreeRequest;

RocksDbStore::RocksDbStore(const RocksDbStoreOptions& options, std::unique_ptr<rocksdb::DB> db)
    : options_(options),
      db_(std::move(db)),
      decide_on_caller_(options.decide_on_caller &&
                        options.durability == Durability::kAsync),
      free_space_(std::make_unique<rocksdb_support::FreeSpaceGuard>(options.path)),
      changes_(std::make_unique<rocksdb::WriteBatch>()) {
  free_space_->SetPending([this] {  // on the lane, as every Check
    uint64_t memtables = 0;
    if (db_ != nullptr) {
      (void)db_->GetIntProperty(rocksdb::DB::Properties::kCurSizeAllMemTables, &memtables);
    }
    return memtables;
  });
  writer_ = std::thread([this] { WriterLoop(); });
  reader_ = std::thread([this] { ReaderLoop(); });
  if (options_.records_compaction_interval.count() > 0) {
    compactor_ = std::thread([this] { CompactorLoop(); });
  }
  writer_id_ = writer_.get_id();
  reader_id_ = reader_.get_id();
}

void RocksDbStore::CompactorLoop() {
  uint64_t compacted_at = 0;  // record_writes_ when the range was last compacted
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    compactor_cv_.wait_for(lock, options_.records_compaction_interval,
                           [this] { return lane_.closing; });
    if (lane_.closing) return;
    const uint64_t writes = record_writes_.load(std::memory_order_relaxed);
    if (writes == compacted_at) continue;
    lock.unlock();
    {
      // Shared: a reopen after a failed write waits for the compaction.
      std::shared_lock<std::shared_mutex> db_lock(db_mu_);
      if (db_ != nullptr) {
        std::string end(kRecordKeyPrefix);
        end.back() = static_cast<char>(end.back() + 1);  // just past every record key
        const rocksdb::Slice begin_key(kRecordKeyPrefix.data(), kRecordKeyPrefix.size());
        const rocksdb::Slice end_key(end);
        rocksdb::CompactRangeOptions range;
        range.exclusive_manual_compaction = false;  // background compactions go on
        rocksdb::Status s = db_->CompactRange(range, &begin_key, &end_key);
        if (s.ok()) {
          compacted_at = writes;
          record_compactions_.fetch_add(1, std::memory_order_relaxed);
        } else {
          spdlog::warn("token store: compacting the idempotency records failed: {}",
                       s.ToString());
        }
      }
    }
    lock.lock();
  }
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

void RocksDbStore::AdvanceTree(TreeWrite write, TreeHandler handler) {
  if (Status s = CheckTreeWrite(write, kMaxKeyBytes); !s.ok()) {
    return handler(s, TreeVerdict{});
  }
  WriteRequest request;
  request.tree = std::make_unique<TreeRequest>(TreeRequest{std::move(write), std::move(handler), {}});
  Submit(std::move(request));
}

void RocksDbStore::GetNode(std::string path, NodeHandler handler) {
  ReadRequest r;
  r.key = std::move(path);
  r.node = std::move(handler);
  SubmitRead(std::move(r));
}

void RocksDbStore::Raise(std::string key, uint64_t token,
                         FenceHandler handler) {
  Enqueue(/*raise=*/true, std::move(key), token, std::move(handler));
}

void RocksDbStore::Get(std::string key, GetHandler handler) {
  if (Status s = CheckTokenKey(key, kMaxKeyBytes); !s.ok()) return handler(s, std::nullopt);
  ReadRequest r;
  r.key = std::move(key);
  r.handler = std::move(handler);
  SubmitRead(std::move(r));
}

void RocksDbStore::SubmitRead(ReadRequest request) {
  Status rejected;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (lane_.closing) {
      rejected = Status::Unavailable("token store is closed");
    } else if (read_queue_.size() >= options_.max_queued) {
      rejected = Status::Unavailable("token store read queue is full (" +
                                     std::to_string(read_queue_.size()) +
                                     " pending)");
    } else {
      read_queue_.push_back(std::move(request));
      lock.unlock();
      reader_cv_.notify_one();
      return;
    }
  }
  if (request.lookup) return request.lookup(rejected, std::nullopt);
  request.handler(rejected, std::nullopt);
}

std::optional<StoreCounters> RocksDbStore::Counters() const {
  StoreStats s = stats();
  return StoreCounters{.requests = s.requests,
                       .batches = s.batches,
                       .writes = s.writes,
                       .write_errors = s.write_errors,
                       .syncs = s.syncs,
                       .recoveries = s.reopens,
                       .ownership = std::nullopt};
}

Status RocksDbStore::Health() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (lane_.closing) return Status::Unavailable("token store is closed");
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

namespace {

// A full scan's reads (ForEach, ForEachNode).
rocksdb::ReadOptions ScanOptions() {
  rocksdb::ReadOptions ro;
  ro.verify_checksums = true;
  ro.fill_cache = false;       // a full scan would only evict the hot keys
  ro.total_order_seek = true;  // a hash memtable iterates in order only when asked
  return ro;
}

}  // namespace

Status RocksDbStore::ForEach(const Visitor& visit) {
  std::shared_lock<std::shared_mutex> lock(db_mu_);
  if (db_ == nullptr) {
    return Status::Unavailable("token store is closed or reopening");
  }
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ScanOptions()));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const std::string_view stored(it->key().data(), it->key().size());
    if (IsRecordKey(stored) || IsTreeKey(stored)) continue;
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

Status RocksDbStore::ForEachNode(const NodeVisitor& visit) {
  std::shared_lock<std::shared_mutex> lock(db_mu_);
  if (db_ == nullptr) {
    return Status::Unavailable("token store is closed or reopening");
  }
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ScanOptions()));
  const rocksdb::Slice prefix(kTreeKeyPrefix.data(), kTreeKeyPrefix.size());
  TreeNode node;
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    const std::string path = it->key().ToString().substr(kTreeKeyPrefix.size());
    if (!DecodeTreeNode(std::string_view(it->value().data(), it->value().size()), &node)) {
      return Status::Corruption("the tree's record for path '" + Printable(path) +
                                "' is not a node");
    }
    if (!visit(path, node)) return Status::Ok();
  }
  return FromRocks(it->status(), "scanning the tree of paths");
}

void RocksDbStore::ReaderLoop() {
  std::deque<ReadRequest> pending;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      reader_cv_.wait(lock,
                      [this] { return lane_.closing || !read_queue_.empty(); });
      if (read_queue_.empty()) return;  // closing, and everything answered
      pending.swap(read_queue_);
    }
    for (ReadRequest& r : pending) {
      if (r.lookup) {
        AnswerLookup(r);
        continue;
      }
      if (r.node) {
        std::optional<TreeNode> node;
        Status s = ReadNode(r.key, &node, /*cache_only=*/false, /*on_lane=*/false);
        r.node(s, s.ok() ? std::move(node) : std::nullopt);
        continue;
      }
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
    lane_.closing = true;
  }
  writer_cv_.notify_all();
  reader_cv_.notify_all();
  compactor_cv_.notify_all();
  writer_.join();  // answers every queued Advance/Raise first
  reader_.join();  // answers every queued Get first
  if (compactor_.joinable()) compactor_.join();

  Status status;
  if (lane_.failed || db_ == nullptr) {
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
