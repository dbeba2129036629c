#include "storage/rocksdb_support.h"

#include <sys/statvfs.h>

#include <cerrno>
#include <filesystem>
#include <system_error>
#include <utility>
#include <vector>

#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/listener.h>
#include <rocksdb/memtablerep.h>
#include <rocksdb/options.h>
#include <rocksdb/slice_transform.h>
#include <rocksdb/table.h>
#include <spdlog/spdlog.h>

#include "storage/log_tail.h"

namespace fencegate::storage::rocksdb_support {
namespace {

// What to do about a damaged store without letting stale writes through:
// any store that starts in its place (a backup, an empty one) holds older
// tokens than the clients' locks have issued, so every key must be raised
// first.
constexpr std::string_view kRestoreAdvice =
    "To start on a backup or an empty directory instead, raise every key to at "
    "least the newest token your lock service has issued before any client "
    "writes (fencegate import with the lock service's current counters, or "
    "POST /v1/keys/{key}/fence for each key): an older store would let the "
    "writes of holders that have lost their locks through";

// RocksDB reports a held LOCK file as a plain IOError naming the file, both
// for another process ("While lock file: .../LOCK: Resource temporarily
// unavailable") and for this one ("lock hold by current process").
bool IsLockHeld(const rocksdb::Status& s) {
  return s.IsIOError() && s.ToString().find("LOCK") != std::string::npos;
}

Status OpenError(const rocksdb::Status& s, const std::string& path) {
  if (IsLockHeld(s)) {
    return Status::Busy("another process holds the data dir lock on " + path +
                        " (is another fencegate running on it?); stop it or "
                        "set storage.path to another directory [" +
                        s.ToString() + "]");
  }
  if (s.IsCorruption()) {
    return Status::Corruption(
        "token store at " + path + " is damaged (" + s.ToString() +
        "); fencegate will not start over it: starting empty, or from what "
        "is readable, would forget accepted tokens. Keep the directory as it is. " +
        std::string(kRestoreAdvice));
  }
  Status st = FromRocks(s, "cannot open token store at " + path);
  if (st.code() == Status::Code::kIoError) {
    return Status::IoError(st.message() +
                           "; check that the directory is readable and "
                           "writable by this user and the disk is not full");
  }
  return st;
}

// Refuses a directory that holds store files (RocksDB's, or the journal's)
// but no CURRENT file: RocksDB
// with create_if_missing would start a new, empty database there. Foreign
// files (lost+found on a volume, a README) are fine.
Status CheckNotPartial(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) {
    return Status::IoError("cannot create data dir " + path + ": " +
                           ec.message() + "; check storage.path");
  }
  if (!fs::is_directory(path, ec)) {
    return Status::IoError("storage.path " + path + " is not a directory");
  }
  if (fs::exists(fs::path(path) / "CURRENT", ec)) return Status::Ok();
  ec.clear();  // an unreadable dir is reported by the listing below
  std::string rocks_file;  // the first RocksDB file found, if any
  for (const auto& entry : fs::directory_iterator(path, ec)) {
    std::string name = entry.path().filename().string();
    if (name.starts_with("MANIFEST-") || name.starts_with("OPTIONS-") ||
        name.ends_with(".sst") || name.ends_with(".log") || name.ends_with(".journal")) {
      rocks_file = std::move(name);
      break;
    }
  }
  if (!rocks_file.empty()) {
    return Status::Corruption(
        "data dir " + path + " holds token store files (" + rocks_file +
        ") but no CURRENT file: the store is damaged or was only partly "
        "created. Refusing to create an empty store over it, which would "
        "forget every accepted token. " + std::string(kRestoreAdvice));
  }
  if (ec) {
    return Status::IoError("cannot list data dir " + path + ": " +
                           ec.message() +
                           "; check that the directory is readable and "
                           "writable by the user fencegate runs as");
  }
  return Status::Ok();
}

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
  // update. One writer lane decides every write (rocksdb_store.h), so
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

}  // namespace

std::string EncodeToken(uint64_t token) {
  std::string out(kTokenBytes, '\0');
  for (size_t i = 0; i < kTokenBytes; ++i) {
    out[i] = static_cast<char>((token >> (56 - 8 * i)) & 0xff);
  }
  return out;
}

uint64_t DecodeToken(std::string_view in) {
  uint64_t token = 0;
  for (size_t i = 0; i < kTokenBytes; ++i) {
    token = (token << 8) | static_cast<unsigned char>(in[i]);
  }
  return token;
}

std::string Printable(std::string_view key) {
  constexpr size_t kMax = 64;
  std::string out;
  for (char c : key.substr(0, kMax)) {
    out += (c >= 0x20 && c < 0x7f) ? c : '?';
  }
  if (key.size() > kMax) out += "...";
  return out;
}

Status FromRocks(const rocksdb::Status& s, const std::string& context) {
  if (s.ok()) return Status::Ok();
  std::string msg = context + ": " + s.ToString();
  if (s.IsNotFound()) return Status::NotFound(std::move(msg));
  if (s.IsCorruption()) return Status::Corruption(std::move(msg));
  if (s.IsBusy() || s.IsTryAgain()) return Status::Busy(std::move(msg));
  if (s.IsIOError()) return Status::IoError(std::move(msg));  // incl. NoSpace
  if (s.IsInvalidArgument() || s.IsNotSupported()) {
    return Status::InvalidArgument(std::move(msg));
  }
  if (s.IsShutdownInProgress() || s.IsAborted() || s.IsIncomplete() ||
      s.IsTimedOut()) {
    return Status::Unavailable(std::move(msg));
  }
  return Status::IoError(std::move(msg));
}

Status OpenDb(const RocksDbStoreOptions& options,
              std::unique_ptr<rocksdb::DB>* db) {
  if (Status s = CheckNotPartial(options.path); !s.ok()) return s;
  rocksdb::Env* env = options.env != nullptr ? options.env : rocksdb::Env::Default();
  // Under RocksDB's own data dir lock, so that no other process's live WAL
  // is cut; when another holds it, DB::Open below reports that.
  rocksdb::FileSystem* fs = env->GetFileSystem().get();
  std::vector<TornTail> torn;
  rocksdb::FileLock* lock = nullptr;
  if (fs->LockFile(options.path + "/LOCK", rocksdb::IOOptions(), &lock, nullptr).ok()) {
    Status repaired = RepairTornTails(fs, options.path, &torn);
    rocksdb::IOStatus unlocked = fs->UnlockFile(lock, rocksdb::IOOptions(), nullptr);
    if (!repaired.ok()) return repaired;
    if (!unlocked.ok()) return OpenError(unlocked, options.path);
  }
  for (const TornTail& t : torn) {
    spdlog::warn(
        "token store: {} ended in a torn page (zeros where a power loss cut off its last "
        "record before its fsync: under durability sync it was never acknowledged, under "
        "async it may have been); cut it at offset {}, dropping {} bytes",
        t.file, t.offset, t.bytes_dropped);
  }
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(MakeOptions(options), options.path, &raw);
  if (!s.ok()) return OpenError(s, options.path);
  db->reset(raw);
  return Status::Ok();
}

namespace {

Status NoSpaceLeft(uint64_t available, const std::string& path) {
  return Status::IoError(
      "no space left for the token store: " + std::to_string(available) +
      " bytes free on the file system of " + path + ", at least " +
      std::to_string(kMinFreeBytes) +
      " needed; free space there (fencegate recovers by itself)");
}

}  // namespace

Status FreeSpaceGuard::StatFreeBytes(const std::string& path, uint64_t* available) {
  struct statvfs fs {};
  if (statvfs(path.c_str(), &fs) != 0) {
    const int err = errno;  // message() is thread-safe, std::strerror() is not
    return Status::IoError("cannot stat the file system of " + path + ": " +
                           std::generic_category().message(err));
  }
  *available = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
  return Status::Ok();
}

Status CheckFreeSpace(const RocksDbStoreOptions& options) {
  uint64_t available = 0;
  if (Status s = FreeSpaceGuard::StatFreeBytes(options.path, &available); !s.ok()) {
    return s;
  }
  if (available < kMinFreeBytes) return NoSpaceLeft(available, options.path);
  return Status::Ok();
}

FreeSpaceGuard::FreeSpaceGuard(std::string path, FreeBytesFn free_bytes)
    : path_(std::move(path)), free_bytes_(std::move(free_bytes)) {
  if (!free_bytes_) {
    free_bytes_ = [this](uint64_t* available) { return StatFreeBytes(path_, available); };
  }
}

Status FreeSpaceGuard::Check(uint64_t bytes, Clock::time_point now) {
  if (bytes < room_ && now - asked_at_ < kRecheck) {
    room_ -= bytes;
    return Status::Ok();
  }
  room_ = 0;
  ++asks_;
  uint64_t available = 0;
  if (Status s = free_bytes_(&available); !s.ok()) return s;
  asked_at_ = now;
  if (available < kMinFreeBytes) return NoSpaceLeft(available, path_);
  const uint64_t above_floor = available - kMinFreeBytes;
  if (above_floor > kHeadroom + bytes) room_ = above_floor - kHeadroom - bytes;
  return Status::Ok();
}

Status ProbeDisk(const RocksDbStoreOptions& options) {
  rocksdb::Env* env =
      options.env != nullptr ? options.env : rocksdb::Env::Default();
  const std::string name = options.path + "/fencegate-disk-probe";
  std::unique_ptr<rocksdb::WritableFile> file;
  rocksdb::Status s = env->NewWritableFile(name, &file, rocksdb::EnvOptions());
  if (s.ok()) s = file->Append("probe");
  if (s.ok()) s = file->Sync();
  if (file != nullptr) {
    rocksdb::Status closed = file->Close();
    if (s.ok()) s = closed;
  }
  rocksdb::Status removed = env->DeleteFile(name);
  if (s.ok()) s = removed;
  return FromRocks(s, "token store data dir is not writable");
}

}  // namespace fencegate::storage::rocksdb_support
