#include "storage/journal.h"

#include <algorithm>
#include <charconv>
#include <utility>

#include <boost/crc.hpp>
#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include "storage/rocksdb_support.h"

namespace fencegate::storage::rocksdb_support {
namespace {

constexpr std::string_view kSuffix = ".journal";
// Replay writes the records into RocksDB in batches of about this size.
constexpr size_t kReplayBatchBytes = 4u << 20;

// CRC-32C (Castagnoli), Boost.CRC's table-driven implementation: a record
// is ~50 bytes, so a table lookup per byte is a few hundred instructions.
uint32_t Checksum(const char* length, std::string_view payload) {
  boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> crc;
  crc.process_bytes(length, 4);
  crc.process_bytes(payload.data(), payload.size());
  return crc.checksum();
}

// Copies the Puts of one journal record into the batch being replayed.
// The store journals only Puts to the default column family; anything
// else means the record is not one of ours.
class CopyPuts : public rocksdb::WriteBatch::Handler {
 public:
  explicit CopyPuts(rocksdb::WriteBatch* out) : out_(out) {}
  rocksdb::Status PutCF(uint32_t cf, const rocksdb::Slice& key,
                        const rocksdb::Slice& value) override {
    if (cf != 0) return Unexpected();
    return out_->Put(key, value);
  }
  rocksdb::Status DeleteCF(uint32_t, const rocksdb::Slice&) override { return Unexpected(); }
  rocksdb::Status SingleDeleteCF(uint32_t, const rocksdb::Slice&) override {
    return Unexpected();
  }
  rocksdb::Status DeleteRangeCF(uint32_t, const rocksdb::Slice&,
                                const rocksdb::Slice&) override {
    return Unexpected();
  }
  rocksdb::Status MergeCF(uint32_t, const rocksdb::Slice&, const rocksdb::Slice&) override {
    return Unexpected();
  }

 private:
  static rocksdb::Status Unexpected() {
    return rocksdb::Status::Corruption("journal record holds something other than a token");
  }
  rocksdb::WriteBatch* out_;
};

// The offset of the first whole record (a non-zero length that fits and a
// checksum that matches) at or after `from`, or npos. A one-time scan of
// an interrupted segment's tail: most offsets fail on the length alone.
size_t FindWholeRecord(std::string_view bytes, size_t from) {
  for (size_t at = from; at + kJournalHeaderBytes < bytes.size(); ++at) {
    const uint32_t length = GetFixed32(bytes.data() + at);
    if (length == 0 || length > bytes.size() - at - kJournalHeaderBytes) continue;
    std::string_view payload = bytes.substr(at + kJournalHeaderBytes, length);
    if (Checksum(bytes.data() + at, payload) == GetFixed32(bytes.data() + at + 4)) return at;
  }
  return std::string_view::npos;
}

}  // namespace

std::string JournalFileName(uint64_t index) {
  std::string digits = std::to_string(index);
  if (digits.size() < 6) digits.insert(0, 6 - digits.size(), '0');
  return digits + std::string(kSuffix);
}

bool ParseJournalFileName(std::string_view name, uint64_t* index) {
  if (!name.ends_with(kSuffix)) return false;
  std::string_view digits = name.substr(0, name.size() - kSuffix.size());
  if (digits.size() < 6 || digits.size() > 20) return false;
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return false;
  }
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), *index);
  return ec == std::errc() && end == digits.data() + digits.size();
}

Status ListJournal(rocksdb::FileSystem* fs, const std::string& dir,
                   std::vector<uint64_t>* indexes) {
  std::vector<std::string> names;
  rocksdb::IOStatus s = fs->GetChildren(dir, rocksdb::IOOptions(), &names, nullptr);
  if (!s.ok()) return FromRocks(s, "listing the journal in " + dir);
  indexes->clear();
  for (const std::string& name : names) {
    uint64_t index = 0;
    if (ParseJournalFileName(name, &index)) indexes->push_back(index);
  }
  std::sort(indexes->begin(), indexes->end());
  return Status::Ok();
}

Status ParseJournalSegment(std::string_view bytes, const std::string& name,
                           const std::function<Status(std::string_view)>& apply,
                           uint64_t* records) {
  size_t at = 0;
  while (bytes.size() - at >= kJournalHeaderBytes) {
    const uint32_t length = GetFixed32(bytes.data() + at);
    const size_t left = bytes.size() - at - kJournalHeaderBytes;
    if (length == 0 || length > left) break;
    std::string_view payload = bytes.substr(at + kJournalHeaderBytes, length);
    if (Checksum(bytes.data() + at, payload) != GetFixed32(bytes.data() + at + 4)) break;
    if (Status s = apply(payload); !s.ok()) return s;
    ++*records;
    at += kJournalHeaderBytes + length;
  }
  if (at == bytes.size()) return Status::Ok();
  // The first record that is not whole: the one a crash interrupted, unless
  // a whole record follows it somewhere.
  if (const size_t next = FindWholeRecord(bytes, at + 1); next != std::string_view::npos) {
    return Status::Corruption(
        "journal " + name + " (written by an earlier fencegate under durability: async) is "
        "damaged at byte " + std::to_string(at) + " and holds a whole record after the damage "
        "(at byte " + std::to_string(next) + "). fencegate will not start and skip it: the "
        "records after the damage held acknowledged tokens. Keep the data dir as it is and "
        "keep a copy of " + name + ". To start without the damaged segment, move it out of the "
        "data dir; then, before clients write, raise every key to at least the newest token "
        "your lock service has issued (fencegate import with its current counters, or POST "
        "/v1/keys/{key}/fence), since the segment may have held higher ones");
  }
  return Status::Ok();
}

Status ReplayJournal(rocksdb::DB* db, rocksdb::FileSystem* fs,
                     const std::string& dir, uint64_t* last_index,
                     uint64_t* records) {
  *last_index = 0;
  uint64_t replayed = 0;
  std::vector<uint64_t> indexes;
  if (Status s = ListJournal(fs, dir, &indexes); !s.ok()) return s;
  if (indexes.empty()) {
    if (records != nullptr) *records = 0;
    return Status::Ok();
  }
  rocksdb::WriteOptions wo;
  wo.disableWAL = true;  // the journal is what makes these durable until the flush
  rocksdb::WriteBatch batch;
  auto write = [&]() -> Status {
    if (batch.Count() == 0) return Status::Ok();
    Status s = FromRocks(db->Write(wo, &batch), "replaying the journal");
    batch.Clear();
    return s;
  };
  CopyPuts copy(&batch);
  for (uint64_t index : indexes) {
    const std::string name = dir + "/" + JournalFileName(index);
    std::string bytes;
    if (rocksdb::IOStatus s = rocksdb::ReadFileToString(fs, name, &bytes); !s.ok()) {
      return FromRocks(s, "reading the journal");
    }
    Status parsed = ParseJournalSegment(
        bytes, name,
        [&](std::string_view payload) -> Status {
          rocksdb::WriteBatch record{std::string(payload)};
          if (rocksdb::Status s = record.Iterate(&copy); !s.ok()) {
            return FromRocks(s, "journal " + name);
          }
          if (batch.GetDataSize() >= kReplayBatchBytes) return write();
          return Status::Ok();
        },
        &replayed);
    if (!parsed.ok()) return parsed;
  }
  if (Status s = write(); !s.ok()) return s;
  rocksdb::FlushOptions flush;
  flush.wait = true;
  flush.allow_write_stall = true;
  if (Status s = FromRocks(db->Flush(flush), "flushing the replayed journal"); !s.ok()) {
    return s;
  }
  if (Status s = DeleteJournal(fs, dir, indexes.back()); !s.ok()) return s;
  *last_index = indexes.back();
  if (records != nullptr) *records = replayed;
  return Status::Ok();
}

Status DeleteJournal(rocksdb::FileSystem* fs, const std::string& dir, uint64_t upto) {
  std::vector<uint64_t> indexes;
  if (Status s = ListJournal(fs, dir, &indexes); !s.ok()) return s;
  for (uint64_t index : indexes) {
    if (index > upto) break;
    rocksdb::IOStatus s =
        fs->DeleteFile(dir + "/" + JournalFileName(index), rocksdb::IOOptions(), nullptr);
    if (!s.ok()) return FromRocks(s, "deleting a flushed journal segment");
  }
  return Status::Ok();
}

}  // namespace fencegate::storage::rocksdb_support
