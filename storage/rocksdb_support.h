#pragma once
// Private to the RocksDB engine: the edge where RocksDB types meet
// fencegate's. The on-disk token format, converting rocksdb::Status to
// storage::Status, and the free space every write needs. Opening the
// database: rocksdb_recovery.h; its options: rocksdb_options.h.

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

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

// Free space the data dir must keep before the store writes: below it a
// write is refused (IoError) instead of being tried. RocksDB's WAL writer
// does not survive a failed append (an assertion aborts the process in
// Debian's librocksdb 7.8), so fencegate fails closed before the disk is
// completely full. A batch is at most ~1 MiB (1024 requests of <= 1 KiB).
inline constexpr uint64_t kMinFreeBytes = 4 << 20;

// Ok when the file system of options.path has at least kMinFreeBytes
// available; IoError saying how much is free and what to do otherwise.
Status CheckFreeSpace(const RocksDbStoreOptions& options);
// Before the database is opened: opening writes the WALs (and an earlier
// fencegate's journal) out as table files, so the file system must have
// kMinFreeBytes plus their size available. A database opened on a full
// disk would fail inside RocksDB, where a failed write aborts the process.
Status CheckRoomToOpen(const RocksDbStoreOptions& options);

// The free-space check of every write, without a statvfs per write. After
// asking the file system it lets writes through without asking again while
// both hold: the answer is younger than kRecheck, and what was free then,
// less the bytes written since, still leaves kHeadroom above kMinFreeBytes.
// Near the floor (less than kHeadroom above it) it asks before every write,
// exactly as CheckFreeSpace does. kHeadroom covers what RocksDB itself may
// write meanwhile (memtable flushes of 8 MiB, their compactions) and other
// writers on the file system: to get under the floor between two asks they
// would have to write 256 MiB within 20 ms (12.8 GB/s). Should one manage
// that, RocksDB's failed WAL append aborts the process: fencegate stops
// (fail-stop, nothing stale gets through), it does not answer 503.
// Not thread-safe: the store's lane holder is its only user.
class FreeSpaceGuard {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kRecheck{20};
  static constexpr uint64_t kHeadroom = uint64_t{256} << 20;

  // Asks the file system of `path` for its available bytes (statvfs).
  static Status StatFreeBytes(const std::string& path, uint64_t* available);

  using FreeBytesFn = std::function<Status(uint64_t* available)>;
  // path: the data dir, asked with StatFreeBytes unless free_bytes is given
  // (tests pass a fake); errors name it.
  explicit FreeSpaceGuard(std::string path, FreeBytesFn free_bytes = {});
  FreeSpaceGuard(const FreeSpaceGuard&) = delete;
  FreeSpaceGuard& operator=(const FreeSpaceGuard&) = delete;

  // The bytes RocksDB may still write on its own before the next ask (its
  // memtables, which a flush writes out): kept free above kMinFreeBytes, so
  // that a flush after the last admitted write finds its room.
  void SetPending(std::function<uint64_t()> pending) { pending_ = std::move(pending); }

  // Ok when a write of `bytes` may go ahead; IoError as CheckFreeSpace's.
  Status Check(uint64_t bytes) { return Check(bytes, Clock::now()); }
  Status Check(uint64_t bytes, Clock::time_point now);
  // The next Check asks the file system (after a failed write).
  void Forget() { room_ = 0; }
  // Times the file system was asked (for tests and the benchmark notes).
  uint64_t asks() const { return asks_; }

 private:
  const std::string path_;
  FreeBytesFn free_bytes_;
  std::function<uint64_t()> pending_;
  Clock::time_point asked_at_{};
  uint64_t room_ = 0;  // bytes that may still be written without asking
  uint64_t asks_ = 0;
};

// A little-endian uint32 at `in`, as RocksDB's log formats store lengths
// and checksums (the WAL's records, the journal's).
inline uint32_t GetFixed32(const char* in) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(in[i]);
  return v;
}

}  // namespace fencegate::storage::rocksdb_support
