// Durable advances per second of the RocksDB token store at 1, 8 and 64
// concurrent writers, durability sync vs async: what group commit buys.
//
//   cmake --build build --target store_bench
//   build/bench/store/store_bench [--benchmark_min_time=2]
//   FENCEGATE_BENCH_DIR=/path/on/the/real/disk build/bench/store/store_bench
//
// Each writer is a closed loop: it issues Advance(key, token+1) on its own
// key and issues the next one from the handler, so W writers keep exactly W
// advances in flight, as W proxy sessions writing to W keys would. The
// store's writer thread gathers whatever is queued into one batch and one
// DB::Write (one fsync under sync). Counters:
//   advances/s        acknowledged advances per second (the rate)
//   fsyncs/s          synced DB::Write calls per second (0 under async)
//   advances/fsync    how many advances shared one fsync (group commit)
// The data dir is a fresh directory under $FENCEGATE_BENCH_DIR (default:
// the system temp dir); fsync cost depends entirely on that disk.

#include <benchmark/benchmark.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "storage/rocksdb_store.h"

namespace fencegate::storage {
namespace {

std::string MakeDir() {
  const char* base = getenv("FENCEGATE_BENCH_DIR");
  std::filesystem::path root =
      base != nullptr ? std::filesystem::path(base) : std::filesystem::temp_directory_path();
  std::string tmpl = (root / "fencegate-store-bench-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) return {};
  return tmpl;
}

// A store on a fresh data dir, closed and removed with the object. On
// failure store() is null and the benchmark is marked skipped.
class BenchStore {
 public:
  BenchStore(benchmark::State& state, RocksDbStoreOptions options) : state_(state) {
    options.path = dir_ = MakeDir();
    if (dir_.empty()) {
      state.SkipWithError("cannot create the data dir");
    } else if (Status s = RocksDbStore::Open(options, &store_); !s.ok()) {
      state.SkipWithError(s.ToString().c_str());
    }
  }
  ~BenchStore() {
    if (store_ != nullptr) {
      Status closed = store_->Close();
      if (!closed.ok()) state_.SkipWithError(closed.ToString().c_str());
      store_.reset();
    }
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }
  BenchStore(const BenchStore&) = delete;
  BenchStore& operator=(const BenchStore&) = delete;

  RocksDbStore* store() const { return store_.get(); }

 private:
  benchmark::State& state_;
  std::string dir_;
  std::unique_ptr<RocksDbStore> store_;
};

// W closed-loop writers; Run(n) lets them complete n advances in all.
class Writers {
 public:
  Writers(RocksDbStore& store, int writers)
      : store_(store), writers_(writers), tokens_(writers, 0) {}

  // Returns false if any advance failed.
  bool Run(int64_t total) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      remaining_ = total;
      running_ = writers_;
      failed_ = false;
    }
    for (int w = 0; w < writers_; ++w) Next(w);
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return running_ == 0; });
    return !failed_;
  }

 private:
  void Next(int w) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (remaining_ <= 0 || failed_) {
        if (--running_ == 0) cv_.notify_all();
        return;
      }
      --remaining_;
    }
    uint64_t token = ++tokens_[w];
    store_.Advance("/bench/" + std::to_string(w), token, [this, w](const Status& s, Fence f) {
      if (!s.ok() || !f.accepted) {
        std::lock_guard<std::mutex> lock(mu_);
        failed_ = true;
      }
      Next(w);  // only enqueues: allowed from a store handler
    });
  }

  RocksDbStore& store_;
  const int writers_;
  std::vector<uint64_t> tokens_;  // per writer; touched only by its own chain
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t remaining_ = 0;  // guarded by mu_
  int running_ = 0;        // guarded by mu_
  bool failed_ = false;    // guarded by mu_
};

void BM_Advance(benchmark::State& state, Durability durability) {
  const int writers = static_cast<int>(state.range(0));
  RocksDbStoreOptions options;
  options.durability = durability;
  BenchStore opened(state, options);
  RocksDbStore* store = opened.store();
  if (store == nullptr) return;
  Writers loop(*store, writers);
  const int64_t per_iteration = 64;  // advances completed per benchmark iteration
  StoreStats before = store->stats();
  for (auto _ : state) {
    if (!loop.Run(per_iteration)) {
      state.SkipWithError("an advance failed");
      break;
    }
  }
  StoreStats after = store->stats();
  const double advances = static_cast<double>(state.iterations() * per_iteration);
  const double fsyncs = static_cast<double>(after.syncs - before.syncs);
  state.counters["advances/s"] = benchmark::Counter(advances, benchmark::Counter::kIsRate);
  state.counters["fsyncs/s"] = benchmark::Counter(fsyncs, benchmark::Counter::kIsRate);
  state.counters["advances/fsync"] = fsyncs > 0 ? advances / fsyncs : 0;
  state.counters["advances/batch"] =
      static_cast<double>(after.requests - before.requests) /
      static_cast<double>(std::max<uint64_t>(1, after.batches - before.batches));
  // Under async, the share decided on the caller's thread (rocksdb_store.h).
  state.counters["on_caller"] =
      static_cast<double>(after.caller_decided - before.caller_decided) /
      static_cast<double>(std::max<uint64_t>(1, after.requests - before.requests));
}

// One caller, async durability, advancing N distinct keys in turn (each
// decided on the caller's thread): the cost of one fenced write's
// check-and-advance once the memtable holds N keys, as in the load test's
// put_async (10k keys). With `evict` > 0 the loop reads that many KiB of
// other memory between two advances, as the other processes on a shared
// core do between two requests at one connection: the lookup then runs
// from cold caches, which is how the proxy meets it. `buckets`:
// RocksDbStoreOptions::memtable_buckets (0: RocksDB's skiplist).
void BM_AdvanceKeys(benchmark::State& state) {
  const int keys = static_cast<int>(state.range(0));
  const size_t evict = static_cast<size_t>(state.range(1)) << 10;
  RocksDbStoreOptions options;
  options.durability = Durability::kAsync;
  options.memtable_buckets = static_cast<size_t>(state.range(2));
  BenchStore opened(state, options);
  RocksDbStore* store = opened.store();
  if (store == nullptr) return;
  std::vector<std::string> names;
  names.reserve(keys);
  for (int k = 0; k < keys; ++k) names.push_back("/items/" + std::to_string(k));
  std::vector<char> other(evict, 1);
  uint64_t token = 1;
  std::atomic<bool> failed{false};
  std::atomic<int> in_flight{0};
  auto done = [&failed, &in_flight](const Status& s, Fence f) {
    if (!s.ok() || !f.accepted) failed = true;
    in_flight.fetch_sub(1, std::memory_order_release);
  };
  // A key that is not cached goes to the writer thread (rocksdb_store.h):
  // keep its queue short of the limit.
  auto advance = [&](const std::string& name) {
    while (in_flight.load(std::memory_order_acquire) > 1024) std::this_thread::yield();
    in_flight.fetch_add(1, std::memory_order_relaxed);
    store->Advance(name, token, done);
  };
  for (const std::string& name : names) advance(name);  // all in the memtable before timing
  size_t i = names.size();  // the first timed advance moves every key to a new token
  uint64_t sink = 0;
  for (auto _ : state) {
    if (i == names.size()) {
      i = 0;
      ++token;
    }
    if (evict > 0) {
      state.PauseTiming();
      for (size_t b = 0; b < other.size(); b += 64) sink += static_cast<unsigned char>(other[b]);
      state.ResumeTiming();
    }
    advance(names[i++]);
  }
  while (in_flight.load(std::memory_order_acquire) > 0) std::this_thread::yield();
  benchmark::DoNotOptimize(sink);
  if (failed.load()) state.SkipWithError("an advance failed");
  state.counters["on_caller"] = static_cast<double>(store->stats().caller_decided) /
                                static_cast<double>(std::max<uint64_t>(1, store->stats().requests));
}

// One caller, async durability, as BM_AdvanceKeys with 10,000 keys, each
// a 4-segment path (/objects/t<k % 2>/d<k % 16>/k<k>, as the load test's
// put_tree writes them): `tree` 1 advances each through AdvanceTree, a
// write of the tree of paths (nesting per_key) that reads and writes the
// nodes of its path and its ancestors; 0 through Advance, the flat fence.
// The difference is the tree's cost inside the store, per write.
void BM_AdvanceTree(benchmark::State& state) {
  const bool tree = state.range(0) != 0;
  constexpr int kKeys = 10000;
  RocksDbStoreOptions options;
  options.durability = Durability::kAsync;
  BenchStore opened(state, options);
  RocksDbStore* store = opened.store();
  if (store == nullptr) return;
  std::vector<std::string> names;
  names.reserve(kKeys);
  for (int k = 0; k < kKeys; ++k) {
    names.push_back("/objects/t" + std::to_string(k % 2) + "/d" + std::to_string(k % 16) + "/k" +
                    std::to_string(k));
  }
  uint64_t token = 1;
  std::atomic<bool> failed{false};
  std::atomic<int> in_flight{0};
  auto advance = [&](const std::string& name) {
    while (in_flight.load(std::memory_order_acquire) > 1024) std::this_thread::yield();
    in_flight.fetch_add(1, std::memory_order_relaxed);
    if (!tree) {
      store->Advance(name, token, [&failed, &in_flight](const Status& s, Fence f) {
        if (!s.ok() || !f.accepted) failed = true;
        in_flight.fetch_sub(1, std::memory_order_release);
      });
      return;
    }
    TreeWrite write;
    write.keys = {name};
    write.token = token;
    write.targets = {TreeTarget{name, name, false, Nesting::kPerKey}};
    store->AdvanceTree(std::move(write), [&failed, &in_flight](const Status& s, TreeVerdict v) {
      if (!s.ok() || v.kind != TreeVerdict::Kind::kAccepted) failed = true;
      in_flight.fetch_sub(1, std::memory_order_release);
    });
  };
  for (const std::string& name : names) advance(name);  // every node stored before timing
  size_t i = names.size();
  for (auto _ : state) {
    if (i == names.size()) {
      i = 0;
      ++token;
    }
    advance(names[i++]);
  }
  while (in_flight.load(std::memory_order_acquire) > 0) std::this_thread::yield();
  if (failed.load()) state.SkipWithError("an advance failed");
  state.counters["on_caller"] = static_cast<double>(store->stats().caller_decided) /
                                static_cast<double>(std::max<uint64_t>(1, store->stats().requests));
}

BENCHMARK(BM_AdvanceKeys)
    ->ArgNames({"keys", "evict_kib", "buckets"})
    ->ArgsProduct({{1, 10000, 100000}, {0, 1024}, {0, 1 << 16}})
    ->Unit(benchmark::kNanosecond);

BENCHMARK(BM_AdvanceTree)->ArgName("tree")->Arg(0)->Arg(1)->Unit(benchmark::kNanosecond);

BENCHMARK_CAPTURE(BM_Advance, sync, Durability::kSync)
    ->ArgName("writers")->Arg(1)->Arg(8)->Arg(64)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Advance, async, Durability::kAsync)
    ->ArgName("writers")->Arg(1)->Arg(8)->Arg(64)->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace fencegate::storage

BENCHMARK_MAIN();
