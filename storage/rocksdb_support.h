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

// Free space the data dir must keep before the store writes: below it a
// write is refused (IoError) instead of being tried. RocksDB's WAL writer
// does not survive a failed append (an assertion aborts the process in
// Debian's librocksdb 7.8), so fencegate fails closed before the disk is
// completely full. A batch is at most ~1 MiB (1024 requests of <= 1 KiB).
inline constexpr uint64_t kMinFreeBytes = 4 << 20;

// Ok when the file system of options.path has at least kMinFreeBytes
// available; IoError saying how much is free and what to do otherwise.
Status CheckFreeSpace(const RocksDbStoreOptions& options);

// Creates, writes, fsyncs and deletes a small file in options.path through
// options.env: ok when the data dir can be written again. Lets recovery
// keep a read-only database open while the disk still fails.
Status ProbeDisk(const RocksDbStoreOptions& options);

}  // namespace fencegate::storage::rocksdb_support
