#pragma once
// Private to the RocksDB engine: the edge where RocksDB types meet
// fencegate's. Opening a database with fencegate's options, converting
// rocksdb::Status to storage::Status, and the on-disk token format.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <rocksdb/db.h>
#include <rocksdb/status.h>

#include "storage/rocksdb_store.h"
#include "storage/status.h"

namespace fencegate::storage::rocksdb_support {

// Bytes of a stored token: the token as a big-endian uint64.
inline constexpr size_t kTokenBytes = 8;

std::string EncodeToken(uint64_t token);
// Requires in.size() == kTokenBytes.
uint64_t DecodeToken(std::string_view in);

// Keys may hold any byte; this keeps error messages printable and short.
std::string Printable(std::string_view key);

// The one place where rocksdb::Status becomes storage::Status:
// IOError/NoSpace -> IoError, Corruption -> Corruption, Busy/TryAgain ->
// Busy, InvalidArgument/NotSupported -> InvalidArgument, ShutdownInProgress/
// Aborted/Incomplete/TimedOut -> Unavailable, anything else -> IoError.
// The message is "<context>: <rocksdb message>".
Status FromRocks(const rocksdb::Status& s, const std::string& context);

// Opens (creating if missing) the database at options.path with the options
// that suit fencegate's small values. Refuses a directory that holds RocksDB
// files without a CURRENT file instead of creating an empty database over
// it. Errors are phrased for the operator (what is wrong, what to do):
// Busy when the data dir lock is held by another process, Corruption for
// damaged data, IoError for paths that cannot be created or written.
// RocksDB's own automatic error recovery is switched off: the writer thread
// recovers (see RocksDbStore), so there is exactly one recovery mechanism.
Status OpenDb(const RocksDbStoreOptions& options,
              std::unique_ptr<rocksdb::DB>* db);

// Creates, writes, fsyncs and deletes a small file in options.path through
// options.env: ok when the data dir can be written again. Lets recovery
// keep a read-only database open while the disk still fails.
Status ProbeDisk(const RocksDbStoreOptions& options);

}  // namespace fencegate::storage::rocksdb_support
