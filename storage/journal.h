#pragma once
// Private to the RocksDB engine: the journal an earlier fencegate kept under
// Durability::kAsync, read once at Open.
//
// That fencegate appended each committed WriteBatch to its own log in the
// data dir instead of RocksDB's WAL (and wrote to RocksDB with the WAL off).
// The store now writes RocksDB's WAL under either durability, but a data
// dir that fencegate left behind may still hold segments whose records
// reached no table file: Open replays them into the database, flushes it
// and deletes them (ReplayJournal), so an upgrade loses no token.
//
// Files: "<index>.journal" in the data dir (index: 6 or more decimal
// digits, increasing). A file is a sequence of records
//   [4 bytes: payload length, little-endian][4 bytes: CRC-32C of the
//   length's 4 bytes and the payload][payload: a rocksdb::WriteBatch's Data()]
// followed, after a crash, by what the interrupted record left: zeros (the
// mapped region's unwritten rest), or payload bytes behind a header that
// was never stored (memcpy may store a large copy's first bytes last).

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
// be the one a crash interrupted: then no whole record follows it (the
// writer appended one record at a time, so a later one means the damage is
// not a crash's), whatever bytes of the interrupted one are there. A whole
// record after it is damage in the middle of the journal, answered
// Corruption with what to do (the records after the damage were
// acknowledged, and forgetting them could let stale writes through), as
// RocksDB's own WAL recovery (kTolerateCorruptedTailRecords) does. An error
// from apply stops the scan and is returned. `name` is for messages.
Status ParseJournalSegment(std::string_view bytes, const std::string& name,
                           const std::function<Status(std::string_view)>& apply,
                           uint64_t* records);

// Replays every segment in `dir` into db, oldest first (each record's
// WriteBatch written with disableWAL; records only ever raise a key's token,
// and a later record of a key is never lower than an earlier one, so
// replaying in order leaves each key at its newest value), flushes the
// memtables to table files, waiting, and then deletes the segments. Sets
// *last_index to the highest index found (0: none). Used at open.
Status ReplayJournal(rocksdb::DB* db, rocksdb::FileSystem* fs,
                     const std::string& dir, uint64_t* last_index,
                     uint64_t* records = nullptr);

// Deletes the segments of `dir` with an index up to `upto` (ReplayJournal,
// once they are in table files).
Status DeleteJournal(rocksdb::FileSystem* fs, const std::string& dir, uint64_t upto);

}  // namespace fencegate::storage::rocksdb_support
