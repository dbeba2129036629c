#pragma once
// Private to the RocksDB engine: opening the database, and the disk probe
// that lets the writer reopen it after a failed write. RocksDbStore::Open
// and RocksDbStore::Recover (rocksdb_recovery.cc) build on these.

#include <memory>

#include <rocksdb/db.h>

#include "storage/rocksdb_store.h"
#include "storage/status.h"

namespace fencegate::storage::rocksdb_support {

// Opens (creating if missing) the database at options.path with
// MakeOptions (rocksdb_options.h). Refuses a directory that holds RocksDB
// files without a CURRENT file instead of creating an empty database over
// it, and first cuts a torn last record off the WAL files and the MANIFEST
// (log_tail.h), under the data dir's lock. Errors are phrased for the
// operator (what is wrong, what to do): Busy when the data dir lock is held
// by another process, Corruption for damaged data, IoError for paths that
// cannot be created or written.
Status OpenDb(const RocksDbStoreOptions& options,
              std::unique_ptr<rocksdb::DB>* db);

// Creates, writes, fsyncs and deletes a small file in options.path through
// options.env: ok when the data dir can be written again. Lets recovery
// keep a read-only database open while the disk still fails.
Status ProbeDisk(const RocksDbStoreOptions& options);

}  // namespace fencegate::storage::rocksdb_support
