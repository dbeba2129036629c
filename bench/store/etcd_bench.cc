// What group commit buys the etcd engine: durable advances per second of
// EtcdStore on a three-member etcd cluster on loopback (Debian's etcd,
// started and stopped here: tests/support/etcd_process.h), batched (the
// calls queued while a transaction is at etcd go together in the next one)
// against one transaction per advance, at 1, 16 and 64 writers.
//
//   cmake --build build --target etcd_bench
//   build/bench/store/etcd_bench [--seconds 5] [--members 3] [--out FILE.json]
//
// Each of W writers is a closed loop, as W proxy sessions writing W keys:
// Advance(its key, token + 1), and the next one from the handler. Per
// writer count and mode: advances/s, transactions/s and advances per
// transaction; then batched over one-per-advance at each W. The JSON goes
// to the build directory's bench-results/ unless --out says otherwise.

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "storage/etcd_client.h"
#include "storage/etcd_store.h"
#include "tests/support/etcd_process.h"

#ifndef FENCEGATE_BENCH_RESULTS_DIR
#define FENCEGATE_BENCH_RESULTS_DIR "bench-results"
#endif

namespace fencegate::storage {
namespace {

using Clock = std::chrono::steady_clock;

class CountingTransport : public EtcdTransport {
 public:
  explicit CountingTransport(std::unique_ptr<EtcdClient> client) : client_(std::move(client)) {}
  Status Call(std::string_view path, const nlohmann::json& request, nlohmann::json* response,
              bool retry_if_unknown, Deadline deadline) override {
    calls.fetch_add(1, std::memory_order_relaxed);
    return client_->Call(path, request, response, retry_if_unknown, nullptr, deadline);
  }
  std::atomic<uint64_t> calls{0};

 private:
  std::unique_ptr<EtcdClient> client_;
};

struct Result {
  double advances_per_s = 0;
  double txns_per_s = 0;
  uint64_t errors = 0;
};

Result Run(const std::vector<std::string>& endpoints, const std::string& prefix, size_t max_batch,
           int writers, std::chrono::seconds duration) {
  EtcdClientOptions options;
  options.endpoints = endpoints;
  std::unique_ptr<EtcdClient> client;
  if (Status s = EtcdClient::Open(options, &client); !s.ok()) {
    std::cerr << "etcd_bench: " << s.ToString() << "\n";
    return {};
  }
  auto transport = std::make_unique<CountingTransport>(std::move(client));
  CountingTransport* counting = transport.get();
  EtcdStoreOptions store_options;
  store_options.prefix = prefix;
  store_options.max_batch = max_batch;
  EtcdStore store(std::move(transport), store_options);

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> done{0};
  std::atomic<uint64_t> errors{0};
  std::atomic<int> running{writers};
  std::mutex mu;
  std::condition_variable all_stopped;
  std::vector<std::function<void(uint64_t)>> loops(static_cast<size_t>(writers));
  for (int w = 0; w < writers; ++w) {
    const std::string key = "/bench/" + std::to_string(w);
    loops[static_cast<size_t>(w)] = [&, key, w](uint64_t token) {
      if (stop.load()) {
        if (running.fetch_sub(1) == 1) {
          std::lock_guard lock(mu);
          all_stopped.notify_one();
        }
        return;
      }
      store.Advance(key, token, [&, w, token](const Status& s, Fence) {
        if (s.ok()) {
          done.fetch_add(1, std::memory_order_relaxed);
        } else {
          errors.fetch_add(1, std::memory_order_relaxed);
        }
        loops[static_cast<size_t>(w)](token + 1);
      });
    };
  }
  const uint64_t calls_before = counting->calls.load();
  const Clock::time_point start = Clock::now();
  for (int w = 0; w < writers; ++w) loops[static_cast<size_t>(w)](1);
  std::this_thread::sleep_for(duration);  // the measured interval, not a synchronisation
  const uint64_t advances = done.load();
  const uint64_t calls = counting->calls.load() - calls_before;
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  stop.store(true);
  {
    std::unique_lock lock(mu);
    all_stopped.wait(lock, [&] { return running.load() == 0; });
  }
  (void)store.Close();
  return {static_cast<double>(advances) / seconds, static_cast<double>(calls) / seconds,
          errors.load()};
}

int Main(int argc, char** argv) {
  int seconds = 5;
  size_t members = 3;
  std::string out;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--seconds") seconds = std::stoi(argv[i + 1]);
    if (flag == "--members") members = static_cast<size_t>(std::stoul(argv[i + 1]));
    if (flag == "--out") out = argv[i + 1];
  }
  std::string error;
  fencegate::testing::EtcdCluster::Options cluster_options;
  cluster_options.members = members;
  auto cluster = fencegate::testing::EtcdCluster::Start(cluster_options, &error);
  if (!cluster) {
    std::cerr << "etcd_bench: cannot start etcd: " << error << "\n";
    return 1;
  }
  nlohmann::json results = {{"members", members}, {"seconds", seconds}, {"runs", nlohmann::json::array()}};
  std::printf("%-8s %8s %14s %10s %12s\n", "writers", "mode", "advances/s", "txns/s",
              "per txn");
  int run = 0;
  for (int writers : {1, 16, 64}) {
    double rate[2] = {0, 0};
    for (int batched = 0; batched < 2; ++batched) {
      const size_t max_batch = batched ? EtcdStoreOptions{}.max_batch : 1;
      Result r = Run(cluster->endpoints(), "bench" + std::to_string(run++) + "/", max_batch,
                     writers, std::chrono::seconds(seconds));
      rate[batched] = r.advances_per_s;
      const char* mode = batched ? "batched" : "one";
      std::printf("%-8d %8s %14.0f %10.0f %12.1f%s\n", writers, mode, r.advances_per_s,
                  r.txns_per_s, r.txns_per_s > 0 ? r.advances_per_s / r.txns_per_s : 0.0,
                  r.errors ? " (errors)" : "");
      results["runs"].push_back({{"writers", writers},
                                 {"mode", mode},
                                 {"advances_per_s", r.advances_per_s},
                                 {"txns_per_s", r.txns_per_s},
                                 {"errors", r.errors}});
    }
    const double ratio = rate[0] > 0 ? rate[1] / rate[0] : 0;
    std::printf("%-8d batched / one txn per advance: %.2f\n", writers, ratio);
    results["ratio_batched_over_one"][std::to_string(writers)] = ratio;
  }
  if (out.empty()) {
    std::filesystem::create_directories(FENCEGATE_BENCH_RESULTS_DIR);
    out = std::string(FENCEGATE_BENCH_RESULTS_DIR) + "/etcd_bench.json";
  }
  std::ofstream(out) << results.dump(2) << "\n";
  std::printf("JSON: %s\n", out.c_str());
  return 0;
}

}  // namespace
}  // namespace fencegate::storage

int main(int argc, char** argv) { return fencegate::storage::Main(argc, argv); }
