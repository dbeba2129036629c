#pragma once
// Private to the RocksDB engine: repairs the torn tail that a power loss
// can leave in RocksDB's log files (the WAL files and the MANIFEST) before
// RocksDB reads them.
//
// A torn page is a file whose size reached the disk while the data of its
// last page did not: from some point on, up to the end of the file, it
// reads as zeros. RocksDB 7.8 reads a record with zeros in its end as a
// checksum mismatch, which neither kTolerateCorruptedTailRecords (WAL) nor
// the MANIFEST reader forgives, so the store would refuse to open after an
// ordinary power loss.
//
// The log format is parsed here by hand because RocksDB's log::Reader is
// not in its public headers. The format: 32 KiB blocks; a physical record
// is a 7-byte header (masked CRC-32C of the type byte and the payload, 4
// bytes little-endian; payload length, 2 bytes little-endian; type, 1 byte:
// 1 full, 2 first, 3 middle, 4 last fragment of a logical record) and its
// payload, never crossing a block; a block's last < 7 bytes are zero
// padding; a header of type 0 and length 0 makes the reader skip the rest
// of its block. Types 5 to 8 are the recyclable records (an 11-byte header
// with the log number) that RocksDB writes only with recycle_log_file_num
// > 0, which fencegate does not set: a file holding one is left alone.

#include <cstdint>
#include <string>
#include <vector>

#include <rocksdb/file_system.h>

#include "storage/status.h"

namespace fencegate::storage::rocksdb_support {

// One truncated file.
struct TornTail {
  std::string file;     // full path
  uint64_t offset = 0;  // where the file now ends: the torn record's start
  uint64_t bytes_dropped = 0;
};

// Truncates `file` (through fs, so that a test file system sees it) at the
// start of its torn last record, if it has one; sets *repaired then
// (otherwise leaves it untouched and *repaired false).
//
// The last record is torn when the first bad physical record (checksum
// mismatch, type 0 inside a fragmented record, or a length past the end of
// its block or of the file) has nothing but zeros after it up to the end of
// the file AND zeros fill its own end (its data stops short, or its header
// is partly zero). Truncating drops that logical record (from its first
// fragment on) and the zeros. That record was never acknowledged: the
// bytes of a page the disk did not keep were never covered by a sync that
// returned, so under durability: sync the write it holds had not been
// answered (a WAL record), or the flush or WAL switch it records had not
// finished (a MANIFEST edit; the files it names are still there, RocksDB
// deletes them only after that sync). Under async a power loss may take
// unsynced writes, as async promises.
//
// Anything else is left for RocksDB to judge and refuse: a bad record with
// non-zero bytes after it (damage in the middle of the log: the records
// after it were acknowledged) or one whose last byte is present (bit rot,
// not a tear). Limit: bit rot in the file's last record whose payload
// happens to end in a zero byte looks like a tear and is dropped.
//
// The truncation is synced before this returns. IoError if the file
// cannot be read, truncated or synced.
Status RepairTornTail(rocksdb::FileSystem* fs, const std::string& file, bool* repaired,
                      TornTail* tail);

// RepairTornTail on every WAL file (*.log) in `dir` and on the MANIFEST
// that dir's CURRENT file names (none when CURRENT is missing or does not
// name a MANIFEST: RocksDB reports that). Appends each repair to *repairs.
Status RepairTornTails(rocksdb::FileSystem* fs, const std::string& dir,
                       std::vector<TornTail>* repairs);

}  // namespace fencegate::storage::rocksdb_support
