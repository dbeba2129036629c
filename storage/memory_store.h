#pragma once
// MemoryStore: a TokenStore engine that keeps its map in memory, for tests,
// as LevelDB's MemEnv is an Env for tests. It decides every call as the
// RocksDB engine does (rocksdb_store.h): the same outcome for Advance,
// AdvanceAll, Raise and Get, the same refusals (CheckTokenKey,
// CheckBatchItems), the same call order, Unavailable after
// Close. tests/storage/token_store_contract_test.cc runs one suite over
// both engines, so a test that passes on this one says something about the
// other.
//
// Nothing survives the object, and nothing fails on its own: a test that
// needs a failing or slow store wraps this one in FaultInjectingStore
// (fault_injecting_store.h), one that needs to hold answers in a test
// wrapper (tests/support/gated_store.h).
//
// Threads. By default the store owns one thread that decides and answers
// every call, Get included, one at a time in the order the calls were made,
// as the RocksDB engine's writer does under sync durability. So a Get sees
// every call made before it, and once a Get's handler runs, every earlier
// call has been answered. With answer_on_caller the store starts no thread:
// it decides and answers each call on the caller's thread before the call
// returns, as the RocksDB engine does under async durability when it is
// idle. Decisions then keep the call order; the handlers of calls made at
// the same time on two threads may run in either order. On an existing key,
// Advance and Raise then allocate nothing.

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "storage/idempotency_store.h"
#include "storage/token_store.h"

namespace fencegate::storage {

struct MemoryStoreOptions {
  // Decide and answer on the caller's thread (see "Threads" above) instead
  // of on the store's own thread.
  bool answer_on_caller = false;
};

class MemoryStore : public TokenStore, public IdempotencyStore {
 public:
  // Longest key accepted, as RocksDbStore::kMaxKeyBytes; longer keys answer
  // InvalidArgument at once.
  static constexpr size_t kMaxKeyBytes = 1024;

  explicit MemoryStore(MemoryStoreOptions options = {});
  // Calls Close().
  ~MemoryStore() override;

  MemoryStore(const MemoryStore&) = delete;
  MemoryStore& operator=(const MemoryStore&) = delete;

  // See token_store.h.
  void Advance(std::string key, uint64_t token, FenceHandler handler) override;
  void AdvanceAll(std::vector<KeyToken> items, BatchFenceHandler handler) override;
  void Raise(std::string key, uint64_t token, FenceHandler handler) override;
  void Get(std::string key, GetHandler handler) override;
  void AdvanceTree(TreeWrite write, TreeHandler handler) override;
  void GetNode(std::string path, NodeHandler handler) override;

  // Idempotency records (idempotency_store.h), decided in the same call
  // order as the calls above and stored encoded, as a disk engine keeps
  // them. Expired records stay until SweepRecords removes them.
  IdempotencyStore* Idempotency() override { return this; }
  void ReserveKey(std::string key, IdempotencyRecord reservation,
                  ReserveHandler handler) override;
  void FinishKey(std::string key, IdempotencyRecord finished, int64_t now_ms,
                 ChangeHandler handler) override;
  void ReleaseKey(std::string key, uint64_t owner, ChangeHandler handler) override;
  void RenewKey(std::string key, uint64_t owner, int64_t expires_ms, int64_t now_ms,
                ChangeHandler handler) override;
  void LookupKey(std::string key, int64_t now_ms, LookupHandler handler) override;
  // Removes the records that are not live at now_ms; returns how many. On
  // the caller's thread, at once.
  size_t SweepRecords(int64_t now_ms);
  // Records held, expired ones included.
  size_t RecordCount();

  // Ok while open, Unavailable after Close().
  Status Health() const override;

  // Stops accepting calls (later ones answer Unavailable at once, on the
  // caller's thread), answers every call already made, stops the store's
  // thread. Always ok; idempotent. Must not be called from a handler
  // (returns InvalidArgument when the store's thread calls it).
  Status Close() override;

  // Returns once every call made before it has been answered (its handler
  // has returned). At once with answer_on_caller, after Close(), and when
  // called from a handler (which cannot wait for itself).
  void Drain();

 private:
  // Runs task(closed) on the caller's thread with answer_on_caller, else
  // queues task(false) for the store's thread; task(true) at once, on the
  // caller's thread, once the store is closing.
  template <class Task>
  void Run(Task task);
  void Loop();

  // Each decides one call against map_ and answers it, on the store's
  // thread or, with answer_on_caller, on the caller's.
  void DoAdvance(std::string key, uint64_t token, const FenceHandler& handler);
  void DoAdvanceAll(const std::vector<KeyToken>& items, const BatchFenceHandler& handler);
  void DoRaise(std::string key, uint64_t token, const FenceHandler& handler);
  void DoGet(const std::string& key, const GetHandler& handler);
  void DoAdvanceTree(const TreeWrite& write, const TreeHandler& handler);

  const bool answer_on_caller_;

  // The stored maxima. Only the store's thread touches it, or, with
  // answer_on_caller, the callers, one at a time.
  std::mutex map_mu_;
  std::map<std::string, uint64_t, std::less<>> map_;  // guarded by map_mu_
  std::map<std::string, std::string, std::less<>> records_;  // guarded by map_mu_; encoded
  std::map<std::string, std::string, std::less<>> nodes_;    // guarded by map_mu_; encoded
  // Applies an engine-neutral decision to records_ (map_mu_ held).
  void Apply(const std::string& key, RecordDecision& change);
  std::optional<std::string> StoredRecord(const std::string& key);  // map_mu_ held

  mutable std::mutex mu_;
  std::condition_variable work_cv_;     // the store's thread: a task or closing
  std::condition_variable drained_cv_;  // Drain(): a task answered
  std::deque<std::function<void(bool)>> queue_;  // guarded by mu_
  uint64_t queued_ = 0;    // guarded by mu_; tasks ever queued
  uint64_t answered_ = 0;  // guarded by mu_; tasks ever run to their end
  bool closing_ = false;   // guarded by mu_; no new calls

  std::mutex close_mu_;  // serialises Close()
  bool closed_ = false;  // guarded by close_mu_

  std::thread thread_;         // absent with answer_on_caller
  std::thread::id thread_id_;  // set once in the constructor
};

}  // namespace fencegate::storage
