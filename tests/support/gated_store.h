#pragma once
// GatedStore: a TokenStore wrapper for tests that holds write calls
// (Advance, AdvanceAll, Raise) at a gate until the test lets them through,
// in the order it picks, or fails them: the test decides when the store
// below decides and answers each one. It keeps no tokens: a call let
// through goes to the store below (storage/memory_store.h, usually), which
// decides it as any call. Get and Health go straight through.
//
// Thread-safe. The store below, or the handler of a failed call, runs on
// the thread that lets the call through (Let, Fail, Release), never under
// the gate's lock.

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "storage/token_store.h"

namespace fencegate::testing {

class GatedStore : public storage::TokenStore {
 public:
  enum class Kind { kAdvance, kAdvanceAll, kRaise };
  // A held call as the test sees it: its kind and its keys and tokens (one
  // item for Advance and Raise).
  struct Held {
    Kind kind;
    std::vector<storage::KeyToken> items;
  };

  // base must outlive the gate. The gate starts open.
  explicit GatedStore(storage::TokenStore& base) : base_(base) {}
  // Answers every call still held Unavailable (it is never decided).
  ~GatedStore() override { AnswerHeldClosed(); }

  // From now on write calls wait at the gate.
  void Hold() {
    std::lock_guard<std::mutex> lock(mu_);
    holding_ = true;
  }
  // Lets every held call through, oldest first (calls made meanwhile queue
  // behind them), then opens the gate.
  void Release() {
    for (;;) {
      Call c;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (calls_.empty()) {
          holding_ = false;
          return;
        }
        c = Take(0);
      }
      Forward(std::move(c));
    }
  }
  // The held calls, oldest first.
  std::vector<Held> held() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<Held> out;
    out.reserve(calls_.size());
    for (const Call& c : calls_) out.push_back(c.held);
    return out;
  }
  size_t held_count() const {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_.size();
  }
  // Lets the i-th held call (0: the oldest) through to the store below.
  void Let(size_t i) { Forward(TakeLocked(i)); }
  // Answers the i-th held call IoError; the store below never sees it.
  void Fail(size_t i) {
    Call c = TakeLocked(i);
    const storage::Status failed = storage::Status::IoError("held call failed");
    if (c.held.kind == Kind::kAdvanceAll) return c.batch_handler(failed, storage::BatchFence{});
    c.handler(failed, storage::Fence{});
  }

  void Advance(std::string key, uint64_t token, FenceHandler handler) override {
    Pass(Call{{Kind::kAdvance, {{std::move(key), token}}}, std::move(handler), {}});
  }
  void AdvanceAll(std::vector<storage::KeyToken> items, BatchFenceHandler handler) override {
    Pass(Call{{Kind::kAdvanceAll, std::move(items)}, {}, std::move(handler)});
  }
  void Raise(std::string key, uint64_t token, FenceHandler handler) override {
    Pass(Call{{Kind::kRaise, {{std::move(key), token}}}, std::move(handler), {}});
  }
  void Get(std::string key, GetHandler handler) override {
    base_.Get(std::move(key), std::move(handler));
  }
  // The base's records, not gated.
  storage::IdempotencyStore* Idempotency() override { return base_.Idempotency(); }
  storage::Status Health() const override { return base_.Health(); }
  // Answers every held call Unavailable, then closes the store below.
  storage::Status Close() override {
    AnswerHeldClosed();
    return base_.Close();
  }

 private:
  struct Call {
    Held held;
    FenceHandler handler;             // kAdvance and kRaise
    BatchFenceHandler batch_handler;  // kAdvanceAll
  };

  // Holds c, or sends it on while the gate is open.
  void Pass(Call c) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (holding_) {
        calls_.push_back(std::move(c));
        return;
      }
    }
    Forward(std::move(c));
  }
  void Forward(Call c) {
    storage::KeyToken& first = c.held.items.front();
    switch (c.held.kind) {
      case Kind::kAdvance:
        return base_.Advance(std::move(first.key), first.token, std::move(c.handler));
      case Kind::kRaise:
        return base_.Raise(std::move(first.key), first.token, std::move(c.handler));
      case Kind::kAdvanceAll:
        return base_.AdvanceAll(std::move(c.held.items), std::move(c.batch_handler));
    }
  }
  Call Take(size_t i) {  // under mu_
    Call c = std::move(calls_.at(i));
    calls_.erase(calls_.begin() + static_cast<std::ptrdiff_t>(i));
    return c;
  }
  Call TakeLocked(size_t i) {
    std::lock_guard<std::mutex> lock(mu_);
    return Take(i);
  }
  void AnswerHeldClosed() {
    std::vector<Call> calls;
    {
      std::lock_guard<std::mutex> lock(mu_);
      calls.swap(calls_);
    }
    const storage::Status closed = storage::Status::Unavailable("token store is closed");
    for (Call& c : calls) {
      if (c.held.kind == Kind::kAdvanceAll) {
        c.batch_handler(closed, storage::BatchFence{});
      } else {
        c.handler(closed, storage::Fence{});
      }
    }
  }

  storage::TokenStore& base_;
  mutable std::mutex mu_;
  bool holding_ = false;    // guarded by mu_
  std::vector<Call> calls_;  // guarded by mu_; held, oldest first
};

}  // namespace fencegate::testing
