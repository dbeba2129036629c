#include "storage/log_tail.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <string_view>

#include <boost/crc.hpp>

#include "storage/rocksdb_support.h"

namespace fencegate::storage::rocksdb_support {
namespace {

constexpr uint64_t kBlockSize = 32768;
constexpr uint64_t kHeaderSize = 7;

enum RecordType : unsigned {
  kZeroType = 0,
  kFullType = 1,
  kFirstType = 2,
  kMiddleType = 3,
  kLastType = 4,
  kRecyclableFullType = 5,
  kRecyclableLastType = 8,
};

// CRC-32C of the type byte and the payload, masked as RocksDB's
// crc32c::Mask does (a CRC stored next to the data it covers).
uint32_t MaskedChecksum(char type, std::string_view payload) {
  boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> crc;
  crc.process_byte(static_cast<unsigned char>(type));
  crc.process_bytes(payload.data(), payload.size());
  const uint32_t c = crc.checksum();
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

// The first bad physical record of a file, as RocksDB's reader sees it.
struct BadRecord {
  uint64_t cut = 0;  // start of the logical record it belongs to
  uint64_t end = 0;  // end of its extent
};

// What a scan of the whole file found.
struct Scan {
  bool recyclable = false;  // a record type this repair does not read
  bool damaged = false;     // a record RocksDB refuses that is intact: not a tear
  std::optional<BadRecord> bad;
  uint64_t nonzero_end = 0;  // one past the file's last non-zero byte
};

// Walks the physical records of one block (at file offset `base`, `n`
// bytes, the file's last when n < kBlockSize), as RocksDB's log::Reader
// does, until the first bad one. in_fragment / logical_start carry a
// fragmented record across blocks.
void ScanBlock(std::string_view block, uint64_t base, bool* in_fragment, uint64_t* logical_start,
               Scan* scan) {
  const uint64_t n = block.size();
  const bool last_block = n < kBlockSize;
  uint64_t pos = 0;
  while (n - pos >= kHeaderSize) {
    const char* h = block.data() + pos;
    const uint64_t length = static_cast<unsigned char>(h[4]) |
                            (static_cast<uint64_t>(static_cast<unsigned char>(h[5])) << 8);
    const unsigned type = static_cast<unsigned char>(h[6]);
    const uint64_t start = base + pos;
    const uint64_t cut = *in_fragment ? *logical_start : start;
    if (type >= kRecyclableFullType && type <= kRecyclableLastType) {
      scan->recyclable = true;
      return;
    }
    if (kHeaderSize + length > n - pos) {
      // Past the end of the file (RocksDB drops it as cut short, unless
      // zeros say it was torn) or of its block (RocksDB refuses it).
      scan->bad = BadRecord{cut, last_block ? base + n : base + kBlockSize};
      return;
    }
    if (type == kZeroType && length == 0) {
      // Preallocated space: RocksDB skips the rest of the block, unless it
      // interrupts a fragmented record.
      if (*in_fragment) scan->bad = BadRecord{cut, start + kHeaderSize};
      return;
    }
    const std::string_view payload = block.substr(pos + kHeaderSize, length);
    if (MaskedChecksum(h[6], payload) != GetFixed32(h)) {
      scan->bad = BadRecord{cut, start + kHeaderSize + length};
      return;
    }
    switch (type) {
      case kFullType:
        if (*in_fragment) scan->damaged = true;
        break;
      case kFirstType:
        if (*in_fragment) scan->damaged = true;
        *in_fragment = true;
        *logical_start = start;
        break;
      case kMiddleType:
        if (!*in_fragment) scan->damaged = true;
        break;
      case kLastType:
        if (!*in_fragment) scan->damaged = true;
        *in_fragment = false;
        break;
      default:  // an unknown type with a valid checksum
        scan->damaged = true;
        break;
    }
    if (scan->damaged) return;
    pos += kHeaderSize + length;
  }
  // Fewer than kHeaderSize bytes left: padding in a full block; at the end
  // of the file a header cut short, which RocksDB drops.
}

Status ReadError(const rocksdb::IOStatus& s, const std::string& file) {
  return FromRocks(s, "cannot read " + file + " to check its end for a torn page");
}

Status ScanFile(rocksdb::FileSystem* fs, const std::string& file, uint64_t size, Scan* scan) {
  std::unique_ptr<rocksdb::FSSequentialFile> in;
  rocksdb::IOStatus s = fs->NewSequentialFile(file, rocksdb::FileOptions(), &in, nullptr);
  if (!s.ok()) return ReadError(s, file);
  std::string scratch(kBlockSize, '\0');
  bool in_fragment = false;
  uint64_t logical_start = 0;
  for (uint64_t base = 0; base < size; base += kBlockSize) {
    const size_t want = static_cast<size_t>(std::min(kBlockSize, size - base));
    rocksdb::Slice got;
    s = in->Read(want, rocksdb::IOOptions(), &got, scratch.data(), nullptr);
    if (!s.ok()) return ReadError(s, file);
    if (got.size() != want) {
      return Status::IoError(file + " ended at " + std::to_string(base + got.size()) +
                             " while checking its end for a torn page (" + std::to_string(size) +
                             " bytes expected)");
    }
    const std::string_view block(got.data(), got.size());
    const size_t last = block.find_last_not_of('\0');
    if (last != std::string_view::npos) scan->nonzero_end = base + last + 1;
    if (!scan->bad && !scan->damaged && !scan->recyclable) {
      ScanBlock(block, base, &in_fragment, &logical_start, scan);
    }
  }
  return Status::Ok();
}

}  // namespace

Status RepairTornTail(rocksdb::FileSystem* fs, const std::string& file, bool* repaired,
                      TornTail* tail) {
  *repaired = false;
  uint64_t size = 0;
  rocksdb::IOStatus s = fs->GetFileSize(file, rocksdb::IOOptions(), &size, nullptr);
  if (!s.ok()) return ReadError(s, file);
  Scan scan;
  if (Status st = ScanFile(fs, file, size, &scan); !st.ok()) return st;
  if (scan.recyclable || scan.damaged || !scan.bad) return Status::Ok();
  // Torn: zeros from inside the bad record to the end of the file.
  if (scan.nonzero_end >= scan.bad->end) return Status::Ok();
  // Through a writable file: the Posix file system has no Truncate of a
  // path, and the sync makes the cut survive another loss.
  std::unique_ptr<rocksdb::FSWritableFile> out;
  s = fs->ReopenWritableFile(file, rocksdb::FileOptions(), &out, nullptr);
  if (s.ok()) s = out->Truncate(scan.bad->cut, rocksdb::IOOptions(), nullptr);
  if (s.ok()) s = out->Fsync(rocksdb::IOOptions(), nullptr);
  if (out != nullptr) {
    rocksdb::IOStatus closed = out->Close(rocksdb::IOOptions(), nullptr);
    if (s.ok()) s = closed;
  }
  if (!s.ok()) {
    return FromRocks(s, "cannot cut the torn page at the end of " + file + " at " +
                            std::to_string(scan.bad->cut));
  }
  *repaired = true;
  *tail = TornTail{file, scan.bad->cut, size - scan.bad->cut};
  return Status::Ok();
}

Status RepairTornTails(rocksdb::FileSystem* fs, const std::string& dir,
                       std::vector<TornTail>* repairs) {
  std::vector<std::string> names;
  rocksdb::IOStatus s = fs->GetChildren(dir, rocksdb::IOOptions(), &names, nullptr);
  if (!s.ok()) return FromRocks(s, "cannot list data dir " + dir);
  std::sort(names.begin(), names.end());
  std::vector<std::string> files;
  for (const std::string& name : names) {
    if (name.size() <= 4 || !name.ends_with(".log")) continue;
    std::string path = dir;
    path.append("/").append(name);
    files.push_back(std::move(path));
  }
  std::string current;
  if (fs->FileExists(dir + "/CURRENT", rocksdb::IOOptions(), nullptr).ok()) {
    s = rocksdb::ReadFileToString(fs, dir + "/CURRENT", &current);
    if (!s.ok()) return FromRocks(s, "cannot read " + dir + "/CURRENT");
    if (!current.empty() && current.back() == '\n') current.pop_back();
    const bool names_manifest = current.starts_with("MANIFEST-") &&
                                current.find('/') == std::string::npos &&
                                std::binary_search(names.begin(), names.end(), current);
    if (names_manifest) files.push_back(dir + "/" + current);
  }
  for (const std::string& file : files) {
    bool repaired = false;
    TornTail tail;
    if (Status st = RepairTornTail(fs, file, &repaired, &tail); !st.ok()) return st;
    if (repaired) repairs->push_back(std::move(tail));
  }
  return Status::Ok();
}

}  // namespace fencegate::storage::rocksdb_support
