#pragma once
// Private to the RocksDB engine: the journal, RocksDbStore's write-ahead log
// under Durability::kAsync.
//
// Why not RocksDB's own WAL there: under async a fenced write's WAL record
// cost more than the rest of RocksDB's write (5,718 of the 18,637
// instructions a fenced write spent in fencegate, instructions.py, session
// 29): Debian's librocksdb builds its test kill points into the WAL writer
// (a std::string per call), times every step, and computes its CRC32C in
// software several times per record. The journal appends each committed
// WriteBatch's bytes, with a length and a checksum, straight into a file
// that RocksDB's POSIX file system maps into memory (the mmap writer that
// RocksDB itself uses for table files when asked; no system call per
// record), and the store writes to RocksDB with WriteOptions::disableWAL.
//
// Crash safety is the WAL's: a record is copied into the shared mapping
// (the page cache) before its write reaches the memtable and before the
// write is answered, so a killed process loses nothing acknowledged; power
// loss loses what was not written back, as async allows (SPEC: "async
// loses the newest tokens on power loss").
//
// Files: "<index>.journal" in the data dir (index: 6 or more decimal
// digits, increasing). A file is a sequence of records
//   [4 bytes: payload length, little-endian][4 bytes: CRC-32C of the
//   length's 4 bytes and the payload][payload: a rocksdb::WriteBatch's Data()]
// followed, after a crash, by the zeros of the mapped region's unwritten
// rest. A segment is deleted only after RocksDB has flushed every memtable
// that its records went into (RocksDbStore::FlushIfDue); what is left on
// disk at a start is replayed in index order (ReplayJournal) and then
// flushed and deleted.
//
// Not thread-safe: the store's lane holder is its only user.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <rocksdb/file_system.h>

#include "storage/status.h"

namespace rocksdb {
class DB;
}  // namespace rocksdb

namespace fencegate::storage::rocksdb_support {

// Bytes before a record's payload: length and checksum.
inline constexpr size_t kJournalHeaderBytes = 8;

// The name of segment `index` ("000042.journal").
std::string JournalFileName(uint64_t index);
// The index of a segment's file name; false for any other name.
bool ParseJournalFileName(std::string_view name, uint64_t* index);

// The segments in `dir`, by index, lowest first.
Status ListJournal(rocksdb::FileSystem* fs, const std::string& dir,
                   std::vector<uint64_t>* indexes);

// Calls apply(payload) for every whole record of one segment's bytes, in
// order, and stops at the first record that is not whole (a zero length,
// a length past the end, a checksum that does not match). That record may
// be the one a crash cut short: then nothing but zeros may follow its
// extent. Anything else after it is damage in the middle of the journal,
// answered Corruption (the records after the damage were acknowledged, and
// forgetting them could let stale writes through), as RocksDB's own WAL
// recovery (kTolerateCorruptedTailRecords) does. An error from apply stops
// the scan and is returned. `name` is for messages.
Status ParseJournalSegment(std::string_view bytes, const std::string& name,
                           const std::function<Status(std::string_view)>& apply,
                           uint64_t* records);

// Replays every segment in `dir` into db, oldest first (each record's
// WriteBatch written with disableWAL; records only ever raise a key's token,
// and a later record of a key is never lower than an earlier one, so
// replaying in order leaves each key at its newest value), flushes the
// memtables to table files, waiting, and then deletes the segments. Sets
// *last_index to the highest index found (0: none). Used at open, and by
// the store after reopening the database to recover from an error.
Status ReplayJournal(rocksdb::DB* db, rocksdb::FileSystem* fs,
                     const std::string& dir, uint64_t* last_index,
                     uint64_t* records = nullptr);

// Deletes the segments of `dir` with an index up to `upto`. The caller
// knows they are closed and flushed; it touches no Journal, so the store's
// writer thread may call it while another thread appends.
Status DeleteJournal(rocksdb::FileSystem* fs, const std::string& dir, uint64_t upto);

class Journal {
 public:
  // Appends to segments of `dir` through `fs` (whose mmap writer it asks
  // for), starting with index first_index when the first record comes.
  Journal(std::shared_ptr<rocksdb::FileSystem> fs, std::string dir,
          uint64_t first_index);
  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  // Appends one record, opening a segment first if none is open. On error
  // the segment is given up (closed as it is: a record cut short there was
  // never acknowledged) and the next Append opens a new one.
  Status Append(std::string_view payload);

  // Closes the open segment, if any; the next Append opens the next one.
  // After it every record appended so far is in a closed segment.
  void Rotate();

  // Highest index of a closed segment (0: none yet).
  uint64_t last_closed() const { return last_closed_; }
  bool has_segment() const { return file_ != nullptr; }

 private:
  Status Open();

  const std::shared_ptr<rocksdb::FileSystem> fs_;
  const std::string dir_;
  uint64_t next_index_;
  uint64_t current_ = 0;      // index of the open segment
  uint64_t last_closed_ = 0;
  std::unique_ptr<rocksdb::FSWritableFile> file_;
  std::string record_;        // header and payload, copied in one Append
};

}  // namespace fencegate::storage::rocksdb_support
