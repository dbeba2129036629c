#pragma once
// The power loss tests' harness: a RocksDbStore over PowerLossFs, writer
// threads that advance keys with ever larger tokens, and the history of
// what they sent and what the store answered, from which each key's floor
// (the lowest value it may hold after a loss) follows.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <rocksdb/env.h>

#include "storage/rocksdb_store.h"
#include "tests/storage/power_loss_fs.h"
#include "tests/storage/test_util.h"

namespace fencegate::storage::testing {

// What the test sent and what the store answered, per key. Thread-safe.
class History {
 public:
  // Called before the request goes out, so that no stored token can be
  // one the history does not know yet.
  void Sent(const std::string& key, uint64_t token);
  // A value the store answered ok with (accepted, or the current value of
  // a refusal): stored, and under sync durable.
  void Answered(const std::string& key, uint64_t value);
  // Done with the answers so far: when they are durable (under sync, or
  // after a clean close) they become floors; after a loss under async they
  // may be gone.
  void TakeAnswers(bool durable);
  // The lowest value `key` may hold from now on (0: may be absent).
  void RaiseFloor(const std::string& key, uint64_t value);
  uint64_t Floor(const std::string& key) const;
  bool WasSent(const std::string& key, uint64_t token) const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::set<uint64_t>> sent_;
  std::map<std::string, uint64_t> answered_;
  std::map<std::string, uint64_t> floor_;
};

// A store over PowerLossFs in a temporary data dir, and its writers.
// FENCEGATE_POWER_LOSS_SEED repeats a run's choices (the seed is in every
// failure message; the threads' interleaving is not repeated), and
// FENCEGATE_POWER_LOSS_ROUNDS sets the rounds of each test.
class PowerLossHarness : public ::testing::Test {
 protected:
  static constexpr int kThreads = 4;
  // Acknowledged operations from the writers' start to the loss, at most.
  static constexpr uint64_t kMaxOpsBeforeLoss = 150;
  // The loss then comes with one of the file system's next operations.
  static constexpr uint64_t kMaxOpsToLoss = 12;

  PowerLossHarness();
  ~PowerLossHarness() override;

  // Opens the store; a random memtable switch size so that some runs
  // flush (table files, MANIFEST updates, WAL switches and deletions).
  Status Open(Durability durability);
  void StartWriters();
  void StopWriters();
  // Waits, at most testing::kHandlerDeadline, for `more` ok answers to the
  // writers from now on.
  ::testing::AssertionResult WaitForAnswers(uint64_t more);
  // The power goes (while the writers run, if they do): deactivates the
  // file system, stops the writers, closes the store (if open), applies
  // the loss, powers on.
  LossReport LosePower(LossMode mode);
  // Reads every key through the store; checks that each is at or above its
  // floor and holds a token sent for it. Returns the values read.
  std::map<std::string, uint64_t> CheckStore(const std::string& when);
  // "seed S, round R, mode (what the loss did)".
  std::string Describe(int round, LossMode mode, const LossReport& r) const;
  int Rounds(int fallback) const;
  // One line on stdout: the seed, the losses and what they took.
  void PrintSummary(const std::string& what) const;
  uint64_t OpsBeforeLoss() { return rng_() % (kMaxOpsBeforeLoss + 1); }

  uint64_t seed_ = 0;
  std::mt19937_64 rng_;
  TempDir dir_;
  std::shared_ptr<PowerLossFs> fs_ = std::make_shared<PowerLossFs>();
  std::unique_ptr<rocksdb::Env> env_ = NewPowerLossEnv(fs_);
  std::unique_ptr<RocksDbStore> store_;  // closes before env_ goes
  const std::vector<std::string> keys_;
  History history_;
  int losses_ = 0;
  int losses_that_took_ = 0;  // losses that dropped bytes or files
  LossReport lost_;           // summed over the losses

 private:
  // One writer: one request at a time, each with a fresh token larger
  // than every token before it, to one key or (AdvanceAll) to two.
  void Write(uint64_t seed);

  std::vector<std::thread> writers_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> next_token_{0};
  std::mutex ops_mu_;
  std::condition_variable ops_cv_;
  uint64_t answered_ops_ = 0;  // guarded by ops_mu_
};

const char* ModeName(LossMode mode);

}  // namespace fencegate::storage::testing
