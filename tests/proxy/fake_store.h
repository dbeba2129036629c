#pragma once
// An in-memory TokenStore for filter tests: same contract as the real
// engines (decides in call order), answers on a thread of its own, and can
// be told to fail.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "storage/token_store.h"

namespace fencegate::testing {

class FakeStore : public storage::TokenStore {
 public:
  std::atomic<bool> fail{false};
  std::atomic<int> advances{0};

  // Advance and Raise decide at once, in call order (token_store.h), and
  // answer from a thread of their own.
  void Advance(std::string key, uint64_t token, FenceHandler h) override {
    advances++;
    if (fail) return Answer([h] { h(storage::Status::IoError("injected"), {}); });
    storage::Fence f;
    {
      std::lock_guard lock(mu_);
      uint64_t& cur = map_[key];
      f.accepted = token >= cur;
      if (f.accepted) cur = token;
      f.current = cur;
    }
    Answer([h, f] { h({}, f); });  // nothing touches `this` after the handler
  }
  // All or nothing, decided at once in call order like Advance.
  void AdvanceAll(std::vector<storage::KeyToken> items, BatchFenceHandler h) override {
    advances++;
    if (storage::Status s = storage::CheckBatchItems(items, 1024); !s.ok()) {
      return Answer([h, s] { h(s, {}); });
    }
    if (fail) return Answer([h] { h(storage::Status::IoError("injected"), {}); });
    storage::BatchFence f;
    {
      std::lock_guard lock(mu_);
      for (size_t i = 0; i < items.size(); ++i) {
        auto it = map_.find(items[i].key);
        const uint64_t cur = it == map_.end() ? 0 : it->second;
        f.current.push_back(cur);
        if (items[i].token < cur && f.stale == SIZE_MAX) f.stale = i;
      }
      f.accepted = f.stale == SIZE_MAX;
      if (f.accepted) {
        for (size_t i = 0; i < items.size(); ++i) {
          uint64_t& cur = map_[items[i].key];
          cur = std::max(cur, items[i].token);
          f.current[i] = cur;
        }
      }
    }
    Answer([h, f] { h({}, f); });
  }
  void Raise(std::string key, uint64_t token, FenceHandler h) override {
    storage::Fence f{true, 0};
    {
      std::lock_guard lock(mu_);
      uint64_t& cur = map_[key];
      cur = std::max(cur, token);
      f.current = cur;
    }
    Answer([h, f] { h({}, f); });
  }
  void Get(std::string key, GetHandler h) override {
    Answer([this, key, h] {
      std::optional<uint64_t> v;
      {
        std::lock_guard lock(mu_);
        auto it = map_.find(key);
        if (it != map_.end()) v = it->second;
      }
      h({}, v);
    });
  }
  storage::Status Health() const override {
    return fail ? storage::Status::IoError("injected") : storage::Status::Ok();
  }
  storage::Status Close() override { return {}; }

  // Joins every answering thread, so no answer outlives the store (and the
  // test that owns it).
  ~FakeStore() override {
    ReleaseAnswers();
    WaitForAnswers();
  }

  // Until ReleaseAnswers, decisions are made but not answered (as an engine
  // whose fsync is under way).
  void HoldAnswers() {
    std::lock_guard lock(threads_mu_);
    held_ = true;
  }
  void ReleaseAnswers() {
    std::lock_guard lock(threads_mu_);
    held_ = false;
    for (auto& f : parked_) threads_.emplace_back(std::move(f));
    parked_.clear();
  }
  // Returns once every answer given so far has run.
  void WaitForAnswers() {
    std::vector<std::thread> threads;
    {
      std::lock_guard lock(threads_mu_);
      threads.swap(threads_);
    }
    for (auto& t : threads) t.join();
  }

 private:
  // Each answer on a fresh thread, as a real engine answers off the caller.
  template <typename F>
  void Answer(F f) {
    std::lock_guard lock(threads_mu_);
    if (held_) {
      parked_.emplace_back(std::move(f));
      return;
    }
    threads_.emplace_back(std::move(f));
  }
  bool held_ = false;                         // guarded by threads_mu_
  std::vector<std::function<void()>> parked_;  // guarded by threads_mu_
  std::mutex threads_mu_;
  std::vector<std::thread> threads_;  // guarded by threads_mu_
  std::mutex mu_;
  std::map<std::string, uint64_t> map_;
};

}  // namespace fencegate::testing
