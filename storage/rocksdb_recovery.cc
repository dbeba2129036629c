// Opening and recovering the database: RocksDbStore::Open (checks, the
// torn-tail repair, DB::Open, the replay of an earlier fencegate's
// journal), the writer's Recover after a failed write, and the errors that
// tell the operator what to do.

#include "storage/rocksdb_recovery.h"

#include <filesystem>
#include <system_error>
#include <utility>
#include <vector>

#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/write_batch.h>
#include <spdlog/spdlog.h>

#include "storage/journal.h"  // an earlier fencegate's journal, replayed at Open
#include "storage/log_tail.h"
#include "storage/rocksdb_options.h"
#include "storage/rocksdb_store.h"
#include "storage/rocksdb_support.h"

namespace fencegate::storage {
namespace rocksdb_support {
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
// but no CURRENT file: RocksDB with create_if_missing would start a new,
// empty database there. Foreign files (lost+found on a volume, a README)
// are fine.
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

}  // namespace

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

}  // namespace rocksdb_support

namespace {

// Proves that the disk takes synced writes again (recovery): an empty write
// that syncs RocksDB's WAL.
rocksdb::Status SyncWal(rocksdb::DB* db) {
  rocksdb::WriteBatch empty;
  rocksdb::WriteOptions wo;
  wo.sync = true;
  return db->Write(wo, &empty);
}

}  // namespace

using rocksdb_support::FromRocks;

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
  if (Status s = rocksdb_support::CheckRoomToOpen(options); !s.ok()) return s;
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

Status RocksDbStore::Recover(bool probe) {
  if (Status s = rocksdb_support::CheckFreeSpace(options_); !s.ok()) return s;
  if (db_failed_ || db_ == nullptr) {
    // Not before the disk takes writes again, so that reads keep working
    // on the open database meanwhile. The reopen replays the WAL: every
    // write that was acknowledged is there.
    if (Status s = rocksdb_support::CheckRoomToOpen(options_); !s.ok()) return s;
    if (Status s = rocksdb_support::ProbeDisk(options_); !s.ok()) return s;
    std::unique_lock<std::shared_mutex> lock(db_mu_);
    if (db_ != nullptr) {
      rocksdb::Status closed = db_->Close();
      (void)closed;  // a database that saw an error may not close cleanly; free it
      db_.reset();
    }
    std::unique_ptr<rocksdb::DB> db;
    if (Status s = rocksdb_support::OpenDb(options_, &db); !s.ok()) return s;
    db_ = std::move(db);
    db_failed_ = false;
    reopens_.fetch_add(1, std::memory_order_relaxed);
  }
  if (!probe) return Status::Ok();
  // Proves the disk writes again. A failure here is RocksDB's (a flush
  // that failed in the background fails every write after it): reopen.
  rocksdb::Status synced = SyncWal(db_.get());
  if (!synced.ok()) db_failed_ = true;
  return FromRocks(synced, "token store write failed");
}

}  // namespace fencegate::storage
