// The options fencegate opens RocksDB with: what each one buys, for
// fencegate's small values and point lookups, is said beside it.

#include "storage/rocksdb_options.h"

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include <rocksdb/compaction_filter.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/listener.h>
#include <rocksdb/memtablerep.h>
#include <rocksdb/slice_transform.h>
#include <rocksdb/table.h>

#include "storage/idempotency_record.h"
#include "storage/rocksdb_support.h"

namespace fencegate::storage::rocksdb_support {
namespace {

// Leaves recovery from background errors to the store's writer thread.
class ManualRecovery : public rocksdb::EventListener {
 public:
  const char* Name() const override { return "FencegateManualRecovery"; }
  void OnErrorRecoveryBegin(rocksdb::BackgroundErrorReason,
                            rocksdb::Status bg_error,
                            bool* auto_recovery) override {
    bg_error.PermitUncheckedError();
    *auto_recovery = false;
  }
};

// Drops the idempotency records whose reservation or window has ended by
// the time a compaction reads them: they already read as absent
// (idempotency_store.h), and dropping them bounds the disk they take to
// what the windows keep. Token keys and records that do not begin as a
// record does are kept (a read reports the damage). Compactions run on
// RocksDB's background threads, never on a request's.
class RecordExpiry : public rocksdb::CompactionFilter {
 public:
  const char* Name() const override { return "FencegateRecordExpiry"; }
  bool Filter(int /*level*/, const rocksdb::Slice& key, const rocksdb::Slice& value,
              std::string* /*new_value*/, bool* /*value_changed*/) const override {
    if (!IsRecordKey(std::string_view(key.data(), key.size()))) return false;
    int64_t expires_ms = 0;
    if (!PeekIdempotencyExpiry(std::string_view(value.data(), value.size()), &expires_ms)) {
      return false;
    }
    const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
    return expires_ms <= now_ms;
  }
};

}  // namespace

rocksdb::Options MakeOptions(const RocksDbStoreOptions& options) {
  rocksdb::Options o;
  o.create_if_missing = true;
  o.paranoid_checks = true;  // fail Open on damage instead of skipping it
  // A record cut short at the end of the WAL is the write a crash
  // interrupted (under kSync never acknowledged: the fsync had not
  // returned) and is dropped; one torn by a power loss (zeros in its end),
  // which RocksDB reads as a checksum mismatch, OpenDb first cuts off
  // (log_tail.h). A damaged record anywhere else fails Open:
  // the records after it were acknowledged, and replaying only up to the
  // damage (kPointInTimeRecovery) would forget their tokens and let stale
  // writes through (RocksDbStoreOpenTest.DamageInTheMiddleOfTheWalFailsOpen).
  o.wal_recovery_mode = rocksdb::WALRecoveryMode::kTolerateCorruptedTailRecords;
  if (options.env != nullptr) o.env = options.env;
  o.listeners.push_back(std::make_shared<ManualRecovery>());
  o.max_background_jobs = 2;
  // Memory: at most two 8 MiB memtables (one filling, one being flushed)
  // and a 16 MiB block cache: 32 MiB whatever the number of keys, plus the
  // filters and indexes below, which grow with it (~1.5 bytes a key). The
  // bound is 64 MiB resident with 1M keys: these sizes take 46 MiB there,
  // where 32 MiB memtables and a 32 MiB cache would take 71. A key record
  // is ~60 bytes in a memtable: a flush every ~130k new keys, into a small
  // L0 file; the keys are point-looked-up, never scanned on the write path.
  o.write_buffer_size = 8 << 20;
  o.max_write_buffer_number = 2;
  o.max_total_wal_size = 128 << 20;
  o.level_compaction_dynamic_level_bytes = true;
  // A fenced write rewrites its key's 8-byte value: in place in the memtable
  // when the key is already there, instead of adding a version. The memtable
  // then holds one entry per key written since the last flush, not one per
  // write: a shallower skiplist for both the Get and the Put of every write
  // (with a version per write the two lookups take ~4.5 of the ~13 us a
  // fenced write adds, `perf`, put_async at 1 connection), and flushes only
  // as often as the WAL limit below asks while the written keys fit. What it
  // gives up is point-in-time iteration over the live memtable; nothing here
  // iterates while the store takes writes (export opens the store with
  // fencegate stopped), and the per-key locks keep a Get from seeing half an
  // update. One writer lane decides every write (rocksdb_writer.h), so
  // concurrent memtable writes, which in-place updates exclude, would buy
  // nothing.
  //
  // With few keys rewritten often the memtable then never fills, and with
  // one column family RocksDB ignores max_total_wal_size: the store itself
  // switches the memtable every RocksDbStoreOptions::wal_bytes_per_flush
  // (16 MiB, ~350k fenced writes), so that what a start after a crash
  // replays stays near what an 8 MiB memtable of one version per write
  // would bound (~140k writes per memtable, two memtables' worth of WAL
  // alive).
  o.inplace_update_support = true;
  o.allow_concurrent_memtable_write = false;
  // The memtable: a hash table of sorted linked lists (a list turns into a
  // skiplist past 256 entries, so colliding keys cost a log, not a line),
  // hashed on the whole key (the no-op prefix extractor: every key is its own
  // prefix). A fenced write looks its key up twice, the Get and the in-place
  // Put, and both find it by its hash instead of walking down a skiplist of
  // every key written since the last switch: store_bench BM_AdvanceKeys, 10k
  // keys, 1.8 us per advance against 3.0 with a skiplist (6.2 against 7.6
  // with cold caches). The bucket array (8 bytes a bucket, 512 KiB at 64k)
  // lives in each memtable's arena. What it costs: an iterator that does not
  // ask for total order sees nothing of the memtable (ForEach asks; nothing
  // else iterates), and a full scan of the live memtable sorts a copy of it
  // first (export, offline).
  if (options.memtable_buckets > 0) {
    o.prefix_extractor.reset(rocksdb::NewNoopTransform());
    o.memtable_factory.reset(rocksdb::NewHashLinkListRepFactory(options.memtable_buckets));
  }
  // Stateless and thread-safe: one for every compaction, alive as long as
  // the process.
  static const RecordExpiry kRecordExpiry;
  o.compaction_filter = &kRecordExpiry;
  o.keep_log_file_num = 5;  // RocksDB's own info LOG files
  o.max_log_file_size = 8 << 20;

  // Small values, point lookups only: bloom filters and a hash index in
  // data blocks make a Get of an absent key cheap.
  //
  // Filter and index blocks live with their table files, outside the block
  // cache (cache_index_and_filter_blocks = false), loaded once when a file is
  // opened: about 1.5 bytes per key (15 MB for 10M keys). In the cache they
  // would be a trap: a file's filter is one block (3.3 MB for 2.6M keys),
  // larger than a shard of the cache (16 MiB / 64 shards), so it would be
  // evicted at once and every Get would read the whole filter again -- 3 MB
  // of pread per fenced write, ~1,700 writes/s, once the store holds a few
  // million keys (a `fencegate import` of 10M keys shows it;
  // bench/load/run.py --keys).
  rocksdb::BlockBasedTableOptions table;
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  table.block_cache = rocksdb::NewLRUCache(16 << 20);
  table.cache_index_and_filter_blocks = false;
  table.data_block_index_type =
      rocksdb::BlockBasedTableOptions::kDataBlockBinaryAndHash;
  o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  return o;
}

}  // namespace fencegate::storage::rocksdb_support
