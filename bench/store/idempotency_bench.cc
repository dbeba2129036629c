// What idempotency records cost the RocksDB store: reserves and finishes N
// records, each with a response body of B bytes, through RocksDbStore's
// IdempotencyStore interface, as the proxy does for a write with a new key;
// then reports the write rate, the process's resident growth and the data
// directory's size on disk: as the store left it, after a flush and after a
// full compaction.
//
//   cmake --build build --target idempotency_bench
//   build/bench/store/idempotency_bench [--records 1000000] [--body-bytes 1024]
//       [--writers 64] [--durability async|sync] [--out FILE.json] [--keep]
//   FENCEGATE_BENCH_DIR=/path/on/the/real/disk build/bench/store/idempotency_bench
//
// Each of W writers is a closed loop, as W proxy sessions at W connections:
// ReserveKey, and from its handler FinishKey with the response, and from
// that handler the next record. A record is what a POST with a new key
// leaves: a key as the proxy names it (route "pay", no scope, a 36-character
// client key), two SHA-256 digests, status 200, three header fields and the
// body, random bytes (compression gains nothing: an upper bound). Its
// window is 24 h, so the compaction filter keeps every record.
//
// Sizes: after the store is closed (its WAL and the table files flushed
// meanwhile); then the directory is opened with the store's own RocksDB
// options, flushed, and compacted into the last level. Each line gives the
// table files, the WAL and the rest (MANIFEST, OPTIONS, RocksDB's info LOG),
// and bytes per million records. Resident size (VmRSS): before the store
// opens, after it opened, after the writes with the store open, and the
// peak (VmHWM) while writing and with the compaction. The data dir is a fresh directory under
// $FENCEGATE_BENCH_DIR (default: the system temp dir), removed at the end
// unless --keep. The JSON goes to the build directory's bench-results/
// unless --out says otherwise.

#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <rocksdb/db.h>

#include "storage/idempotency_store.h"
#include "storage/rocksdb_options.h"
#include "storage/rocksdb_store.h"

#ifndef FENCEGATE_BENCH_RESULTS_DIR
#define FENCEGATE_BENCH_RESULTS_DIR "bench-results"
#endif

namespace fencegate::storage {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Args {
  int64_t records = 1000000;
  size_t body_bytes = 1024;
  int writers = 64;
  Durability durability = Durability::kAsync;
  std::string out;
  bool keep = false;
};

bool ParseArgs(int argc, char** argv, Args* args) {
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    auto value = [&](const char** v) {
      if (i + 1 >= argc) return false;
      *v = argv[++i];
      return true;
    };
    const char* v = nullptr;
    if (a == "--keep") {
      args->keep = true;
    } else if (a == "--records" && value(&v)) {
      args->records = std::atoll(v);
    } else if (a == "--body-bytes" && value(&v)) {
      args->body_bytes = static_cast<size_t>(std::atoll(v));
    } else if (a == "--writers" && value(&v)) {
      args->writers = std::atoi(v);
    } else if (a == "--durability" && value(&v) &&
               (std::string_view(v) == "async" || std::string_view(v) == "sync")) {
      args->durability = std::string_view(v) == "sync" ? Durability::kSync : Durability::kAsync;
    } else if (a == "--out" && value(&v)) {
      args->out = v;
    } else {
      return false;
    }
  }
  return args->records > 0 && args->writers > 0 && args->body_bytes <= kMaxStoredBodyBytes;
}

// /proc/self/status's field in KiB, or -1.
int64_t StatusKiB(std::string_view field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with(field) && line.size() > field.size() && line[field.size()] == ':') {
      return std::atoll(line.c_str() + field.size() + 1);
    }
  }
  return -1;
}

// Bytes under dir: table files, WAL files, everything else.
struct DirSize {
  uint64_t sst = 0;
  uint64_t wal = 0;
  uint64_t other = 0;
  uint64_t total() const { return sst + wal + other; }
};

DirSize SizeOf(const std::string& dir) {
  DirSize size;
  std::error_code ec;
  for (const auto& entry : fs::recursive_directory_iterator(dir, ec)) {
    if (!entry.is_regular_file(ec)) continue;
    const uint64_t n = entry.file_size(ec);
    const std::string ext = entry.path().extension().string();
    (ext == ".sst" ? size.sst : ext == ".log" ? size.wal : size.other) += n;
  }
  return size;
}

std::string MakeDir() {
  const char* base = getenv("FENCEGATE_BENCH_DIR");
  fs::path root = base != nullptr ? fs::path(base) : fs::temp_directory_path();
  std::string tmpl = (root / "fencegate-idempotency-bench-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) return {};
  return tmpl;
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The client key of record i: 36 characters, like a UUID.
std::string ClientKey(int64_t i) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "00000000-bench-%021lld", static_cast<long long>(i));
  return buf;
}

// The store's name for record i, as the proxy makes it (route "pay", no
// scope): "3:pay//" and the client key.
std::string RecordKey(int64_t i) { return "3:pay//" + ClientKey(i); }

// W closed-loop writers; Run() returns once every record is finished, or
// false at the first failure.
class Writers {
 public:
  // pool: random bytes the bodies are cut from, at least body_bytes long.
  Writers(RocksDbStore& store, const Args& args, const std::string& pool)
      : store_(store), args_(args), pool_(pool) {}

  bool Run() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      running_ = args_.writers;
    }
    for (int w = 0; w < args_.writers; ++w) Next();
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return running_ == 0; });
    return failed_.empty();
  }

  std::string failure() const { return failed_; }

 private:
  void Fail(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu_);
    if (failed_.empty()) failed_ = what;
  }

  // Starts the next record on this writer's chain, or ends the chain.
  void Next() {
    const int64_t i = next_.fetch_add(1, std::memory_order_relaxed);
    bool stop = i >= args_.records;
    if (!stop) {
      std::lock_guard<std::mutex> lock(mu_);
      stop = !failed_.empty();
    }
    if (stop) {
      std::lock_guard<std::mutex> lock(mu_);
      if (--running_ == 0) cv_.notify_all();
      return;
    }
    IdempotencyRecord r;
    r.state = IdempotencyRecord::State::kReserved;
    r.owner = static_cast<uint64_t>(i) + 1;
    r.created_ms = NowMs();
    r.expires_ms = r.created_ms + 60'000;
    r.head_digest.assign(kDigestBytes, static_cast<char>(i));
    store_.ReserveKey(RecordKey(i), std::move(r),
                      [this, i](const Status& s, Reservation got) {
                        if (!s.ok() || !got.reserved) {
                          Fail("reserving record " + std::to_string(i) + ": " + s.ToString());
                          return Next();
                        }
                        Finish(i);
                      });
  }

  void Finish(int64_t i) {
    IdempotencyRecord r;
    r.state = IdempotencyRecord::State::kFinished;
    r.owner = static_cast<uint64_t>(i) + 1;
    const int64_t now = NowMs();
    r.created_ms = now;
    r.expires_ms = now + 24 * 3600 * 1000;
    r.head_digest.assign(kDigestBytes, static_cast<char>(i));
    r.body_digest.assign(kDigestBytes, static_cast<char>(i >> 8));
    r.response.status = 200;
    r.response.headers = {{"Server", "nginx/1.22.1"},
                          {"Date", "Tue, 02 Jan 2024 10:00:00 GMT"},
                          {"Content-Type", "application/json"}};
    const size_t span = pool_.size() - args_.body_bytes;
    const size_t offset = static_cast<size_t>(i * 7919 * 1031) % (span + 1);
    r.response.body.assign(pool_.data() + offset, args_.body_bytes);
    r.response.body_bytes = args_.body_bytes;
    store_.FinishKey(RecordKey(i), std::move(r), now, [this, i](const Status& s, bool applied) {
      if (!s.ok() || !applied) {
        Fail("finishing record " + std::to_string(i) + ": " + s.ToString());
      }
      Next();  // only calls the store: allowed from a store handler
    });
  }

  RocksDbStore& store_;
  const Args& args_;
  const std::string& pool_;
  std::atomic<int64_t> next_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  int running_ = 0;     // guarded by mu_
  std::string failed_;  // guarded by mu_
};

std::string SizeJson(const DirSize& s, int64_t records) {
  const double per_million = 1e6 / static_cast<double>(records);
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "{\"sst\": %llu, \"wal\": %llu, \"other\": %llu, \"total\": %llu, "
                "\"total_per_million_records\": %.0f}",
                static_cast<unsigned long long>(s.sst), static_cast<unsigned long long>(s.wal),
                static_cast<unsigned long long>(s.other),
                static_cast<unsigned long long>(s.total()),
                static_cast<double>(s.total()) * per_million);
  return buf;
}

void PrintSize(const char* when, const DirSize& s, int64_t records) {
  const double mib = 1024.0 * 1024.0;
  std::printf("%-22s %8.1f MiB (table files %.1f, WAL %.1f, other %.1f); %.0f MiB per million "
              "records\n",
              when, s.total() / mib, s.sst / mib, s.wal / mib, s.other / mib,
              s.total() / mib * 1e6 / static_cast<double>(records));
}

// Opens the closed store's directory with its own RocksDB options, counts
// the records, then flushes and measures, compacts and measures.
bool FlushAndCompact(const RocksDbStoreOptions& options, int64_t* records, DirSize* flushed,
                     DirSize* compacted) {
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(rocksdb_support::MakeOptions(options), options.path, &raw);
  if (!s.ok()) {
    std::fprintf(stderr, "opening the data dir: %s\n", s.ToString().c_str());
    return false;
  }
  std::unique_ptr<rocksdb::DB> db(raw);
  s = db->Flush(rocksdb::FlushOptions{});
  if (s.ok()) s = db->FlushWAL(true);
  if (!s.ok()) {
    std::fprintf(stderr, "flushing: %s\n", s.ToString().c_str());
    return false;
  }
  *flushed = SizeOf(options.path);
  rocksdb::CompactRangeOptions compact;
  compact.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
  s = db->CompactRange(compact, nullptr, nullptr);
  if (!s.ok()) {
    std::fprintf(stderr, "compacting: %s\n", s.ToString().c_str());
    return false;
  }
  *compacted = SizeOf(options.path);
  rocksdb::ReadOptions ro;
  ro.total_order_seek = true;
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(ro));
  int64_t n = 0;
  for (it->Seek(rocksdb::Slice(kRecordKeyPrefix.data(), kRecordKeyPrefix.size()));
       it->Valid() && it->key().starts_with(
                          rocksdb::Slice(kRecordKeyPrefix.data(), kRecordKeyPrefix.size()));
       it->Next()) {
    ++n;
  }
  *records = n;
  const bool scanned = it->status().ok();
  it.reset();  // before the database closes
  return scanned && db->Close().ok();
}

int Main(int argc, char** argv) {
  Args args;
  if (!ParseArgs(argc, argv, &args)) {
    std::fprintf(stderr,
                 "usage: %s [--records N] [--body-bytes B] [--writers W] "
                 "[--durability async|sync] [--out FILE.json] [--keep]\n",
                 argv[0]);
    return 2;
  }
  const char* durability = args.durability == Durability::kSync ? "sync" : "async";
  if (args.out.empty()) {
    args.out = std::string(FENCEGATE_BENCH_RESULTS_DIR) + "/idempotency_bench-" + durability +
               ".json";
  }
  RocksDbStoreOptions options;
  options.durability = args.durability;
  options.path = MakeDir();
  if (options.path.empty()) {
    std::fprintf(stderr, "cannot create the data dir\n");
    return 1;
  }
  // The bodies' bytes, before the first resident size.
  std::string pool(std::max<size_t>(size_t{4} << 20, args.body_bytes), '\0');
  std::mt19937_64 rng(42);
  for (char& c : pool) c = static_cast<char>(rng());

  const int64_t rss_start = StatusKiB("VmRSS");
  std::unique_ptr<RocksDbStore> store;
  if (Status s = RocksDbStore::Open(options, &store); !s.ok()) {
    std::fprintf(stderr, "opening the store: %s\n", s.ToString().c_str());
    return 1;
  }
  const int64_t rss_open = StatusKiB("VmRSS");
  Writers writers(*store, args, pool);
  const Clock::time_point t0 = Clock::now();
  const bool written = writers.Run();
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  const int64_t rss_written = StatusKiB("VmRSS");
  const int64_t rss_peak_writes = StatusKiB("VmHWM");
  const StoreStats stats = store->stats();
  // The last record reads back whole.
  std::promise<std::optional<IdempotencyRecord>> last;
  store->LookupKey(RecordKey(args.records - 1), NowMs(),
                   [&last](const Status& s, std::optional<IdempotencyRecord> r) {
                     last.set_value(s.ok() ? std::move(r) : std::nullopt);
                   });
  std::optional<IdempotencyRecord> got = last.get_future().get();
  const bool read_back = got && got->state == IdempotencyRecord::State::kFinished &&
                         got->response.body.size() == args.body_bytes;
  const Status closed = store->Close();
  store.reset();
  if (!written || !closed.ok() || !read_back) {
    std::fprintf(stderr, "failed: %s%s%s\n", writers.failure().c_str(),
                 closed.ok() ? "" : closed.ToString().c_str(),
                 read_back ? "" : " (the last record did not read back)");
    return 1;
  }
  const DirSize at_close = SizeOf(options.path);
  int64_t counted = 0;
  DirSize flushed, compacted;
  if (!FlushAndCompact(options, &counted, &flushed, &compacted)) return 1;
  const int64_t rss_peak = StatusKiB("VmHWM");  // the flush and compaction included

  std::printf("%lld records, %zu-byte bodies, %d writers, durability %s, data dir %s\n",
              static_cast<long long>(args.records), args.body_bytes, args.writers, durability,
              options.path.c_str());
  std::printf("write rate             %.0f records/s (reserve + finish), %.1f s; %.1f requests "
              "a batch, %llu fsyncs\n",
              static_cast<double>(args.records) / secs, secs,
              static_cast<double>(stats.requests) /
                  static_cast<double>(std::max<uint64_t>(1, stats.batches)),
              static_cast<unsigned long long>(stats.syncs));
  std::printf("resident (VmRSS)       %.1f MiB before, %.1f MiB open, %.1f MiB after the writes "
              "(+%.1f MiB), peak %.1f MiB while writing, %.1f MiB with the compaction\n",
              rss_start / 1024.0, rss_open / 1024.0, rss_written / 1024.0,
              (rss_written - rss_start) / 1024.0, rss_peak_writes / 1024.0, rss_peak / 1024.0);
  PrintSize("on disk, as closed", at_close, args.records);
  PrintSize("after a flush", flushed, args.records);
  PrintSize("after a compaction", compacted, args.records);
  std::printf("records in the store   %lld\n", static_cast<long long>(counted));

  std::error_code ec;
  fs::create_directories(fs::path(args.out).parent_path(), ec);
  std::ofstream json(args.out);
  json << "{\"records\": " << args.records << ", \"body_bytes\": " << args.body_bytes
       << ", \"writers\": " << args.writers << ", \"durability\": \"" << durability
       << "\", \"seconds\": " << secs
       << ", \"records_per_s\": " << static_cast<double>(args.records) / secs
       << ", \"requests_per_batch\": "
       << static_cast<double>(stats.requests) /
              static_cast<double>(std::max<uint64_t>(1, stats.batches))
       << ", \"fsyncs\": " << stats.syncs << ", \"rss_kib\": {\"before\": " << rss_start
       << ", \"open\": " << rss_open << ", \"after_writes\": " << rss_written
       << ", \"peak_writing\": " << rss_peak_writes << ", \"peak\": " << rss_peak << "}, \"disk_bytes\": {\"as_closed\": "
       << SizeJson(at_close, args.records) << ", \"after_flush\": "
       << SizeJson(flushed, args.records) << ", \"after_compaction\": "
       << SizeJson(compacted, args.records) << "}, \"records_counted\": " << counted << "}\n";
  json.close();
  std::printf("JSON: %s\n", json ? args.out.c_str() : "(could not be written)");
  if (!args.keep) fs::remove_all(options.path, ec);
  return counted == args.records && json ? 0 : 1;
}

}  // namespace
}  // namespace fencegate::storage

int main(int argc, char** argv) { return fencegate::storage::Main(argc, argv); }
