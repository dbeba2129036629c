#include "tests/storage/power_loss_harness.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <utility>

namespace fencegate::storage::testing {
namespace {

constexpr int kShortKeys = 12;
constexpr int kLongKeys = 6;  // ~1 KiB each: WAL records that span pages

uint64_t EnvOr(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::strtoull(v, nullptr, 10) : fallback;
}

std::vector<std::string> MakeKeys() {
  std::vector<std::string> keys;
  for (int i = 0; i < kShortKeys; ++i) keys.push_back("/k" + std::to_string(i));
  for (int i = 0; i < kLongKeys; ++i) {
    std::string key = "/long" + std::to_string(i) + "/";
    key.resize(1000, static_cast<char>('a' + i));
    keys.push_back(std::move(key));
  }
  return keys;
}

std::string ShortName(const std::string& key) {
  return key.size() > 12 ? key.substr(0, 12) + "..." : key;
}

}  // namespace

const char* ModeName(LossMode mode) {
  switch (mode) {
    case LossMode::kDropUnsynced:
      return "drop-unsynced";
    case LossMode::kKeepRandomPrefix:
      return "random-prefix";
    case LossMode::kTearLastPage:
      return "torn-page";
  }
  return "?";
}

void History::Sent(const std::string& key, uint64_t token) {
  std::lock_guard<std::mutex> lock(mu_);
  sent_[key].insert(token);
}

void History::Answered(const std::string& key, uint64_t value) {
  std::lock_guard<std::mutex> lock(mu_);
  answered_[key] = std::max(answered_[key], value);
}

void History::TakeAnswers(bool durable) {
  std::lock_guard<std::mutex> lock(mu_);
  if (durable) {
    for (const auto& [key, value] : answered_) floor_[key] = std::max(floor_[key], value);
  }
  answered_.clear();
}

void History::RaiseFloor(const std::string& key, uint64_t value) {
  std::lock_guard<std::mutex> lock(mu_);
  floor_[key] = std::max(floor_[key], value);
}

uint64_t History::Floor(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = floor_.find(key);
  return it == floor_.end() ? 0 : it->second;
}

bool History::WasSent(const std::string& key, uint64_t token) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sent_.find(key);
  return it != sent_.end() && it->second.count(token) > 0;
}

PowerLossHarness::PowerLossHarness() : keys_(MakeKeys()) {
  seed_ = EnvOr("FENCEGATE_POWER_LOSS_SEED", std::random_device{}());
  rng_.seed(seed_);
}

PowerLossHarness::~PowerLossHarness() {
  StopWriters();
  fs_->Reactivate();
  if (store_) (void)store_->Close();
}

Status PowerLossHarness::Open(Durability durability) {
  RocksDbStoreOptions options;
  options.path = dir_.path();
  options.env = env_.get();
  options.durability = durability;
  options.wal_bytes_per_flush = rng_() % 2 == 0 ? (32u << 10) : (16u << 20);
  return RocksDbStore::Open(options, &store_);
}

void PowerLossHarness::StartWriters() {
  stop_ = false;
  for (int t = 0; t < kThreads; ++t) writers_.emplace_back([this, r = rng_()] { Write(r); });
}

void PowerLossHarness::StopWriters() {
  stop_ = true;
  for (std::thread& t : writers_) t.join();
  writers_.clear();
}

::testing::AssertionResult PowerLossHarness::WaitForAnswers(uint64_t more) {
  std::unique_lock<std::mutex> lock(ops_mu_);
  const uint64_t target = answered_ops_ + more;
  if (!ops_cv_.wait_until(lock, std::chrono::steady_clock::now() + kHandlerDeadline,
                          [&] { return answered_ops_ >= target; })) {
    return ::testing::AssertionFailure() << "seed " << seed_ << ": writers stalled at "
                                         << answered_ops_ << " answers, waiting for " << target;
  }
  return ::testing::AssertionSuccess();
}

LossReport PowerLossHarness::LosePower(LossMode mode) {
  if (writers_.empty()) {
    fs_->Deactivate();
  } else {
    // At one of the next few I/O steps of the store: between a WAL append
    // and its sync, in the middle of a flush, ...
    fs_->DeactivateAfter(rng_() % kMaxOpsToLoss);
    EXPECT_TRUE(fs_->WaitDeactivated(kHandlerDeadline)) << "seed " << seed_ << ": no I/O";
    fs_->Deactivate();
  }
  StopWriters();
  (void)store_->Close();  // reports the writes the loss failed: expected
  store_.reset();
  LossReport r;
  rocksdb::IOStatus s = fs_->LosePower(mode, rng_, &r);
  EXPECT_TRUE(s.ok()) << s.ToString();
  fs_->Reactivate();
  ++losses_;
  if (r.bytes_lost > 0 || r.files_removed > 0) ++losses_that_took_;
  lost_.files_cut += r.files_cut;
  lost_.files_removed += r.files_removed;
  lost_.files_restored += r.files_restored;
  lost_.bytes_lost += r.bytes_lost;
  lost_.bytes_zeroed += r.bytes_zeroed;
  return r;
}

std::map<std::string, uint64_t> PowerLossHarness::CheckStore(const std::string& when) {
  std::map<std::string, uint64_t> values;
  for (const std::string& key : keys_) {
    GetResult g = GetSync(*store_, key);
    EXPECT_TRUE(g.status.ok()) << when << ": " << ShortName(key) << ": " << g.status.ToString();
    const uint64_t floor = history_.Floor(key);
    if (!g.value.has_value()) {
      EXPECT_EQ(floor, 0u) << when << ": " << ShortName(key) << " is gone, it held " << floor;
      continue;
    }
    EXPECT_GE(*g.value, floor) << when << ": " << ShortName(key) << " went down";
    EXPECT_TRUE(history_.WasSent(key, *g.value))
        << when << ": " << ShortName(key) << " holds " << *g.value << ", never sent for it";
    values[key] = *g.value;
  }
  return values;
}

std::string PowerLossHarness::Describe(int round, LossMode mode, const LossReport& r) const {
  std::ostringstream out;
  out << "seed " << seed_ << ", round " << round << ", " << ModeName(mode) << " (" << r.files_cut
      << " files cut, " << r.files_removed << " removed, " << r.files_restored << " restored, "
      << r.bytes_lost << " bytes lost, " << r.bytes_zeroed << " zeroed)";
  return out.str();
}

int PowerLossHarness::Rounds(int fallback) const {
  return static_cast<int>(EnvOr("FENCEGATE_POWER_LOSS_ROUNDS", fallback));
}

void PowerLossHarness::PrintSummary(const std::string& what) const {
  std::cout << "[   INFO   ] seed " << seed_ << ": " << losses_ << " power losses ("
            << losses_that_took_ << " took unsynced data)" << what << "; " << lost_.bytes_lost
            << " unsynced bytes lost, " << lost_.bytes_zeroed << " zeroed, " << lost_.files_removed
            << " files removed, " << lost_.files_restored << " restored\n";
}

void PowerLossHarness::Write(uint64_t seed) {
  std::mt19937_64 rng(seed);
  while (!stop_) {
    const uint64_t token = next_token_.fetch_add(1) + 1;
    const size_t i = rng() % keys_.size();
    const std::string& a = keys_[i];
    bool ok = false;
    if (rng() % 5 == 0) {
      const std::string& b = keys_[(i + 1 + rng() % (keys_.size() - 1)) % keys_.size()];
      history_.Sent(a, token);
      history_.Sent(b, token);
      BatchResult r = AdvanceAllSync(*store_, {{a, token}, {b, token}});
      ok = r.status.ok();
      // A refusal reports 0 for a key never stored.
      if (ok && r.fence.current.size() == 2) {
        if (r.fence.current[0] > 0) history_.Answered(a, r.fence.current[0]);
        if (r.fence.current[1] > 0) history_.Answered(b, r.fence.current[1]);
      }
    } else {
      history_.Sent(a, token);
      FenceResult r = AdvanceSync(*store_, a, token);
      ok = r.status.ok();
      if (ok) history_.Answered(a, r.fence.current);
    }
    if (ok) {
      std::lock_guard<std::mutex> lock(ops_mu_);
      ++answered_ops_;
    }
    ops_cv_.notify_all();
  }
}

}  // namespace fencegate::storage::testing
