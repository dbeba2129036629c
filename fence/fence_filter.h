#pragma once
// The fence filter (docs/contract.md, "The write path"): for a fenced write
// that Classify (classify.h) found, waits for the key's turn (per-key queue)
// and runs the atomic check-and-advance, before the session forwards it
// upstream. FenceFilter::Check() talks to the TokenStore and the KeyQueue
// and resumes the caller on the caller's executor; it is unit-tested with a
// fake store and no sockets.

#include <boost/asio/any_io_executor.hpp>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "fence/classify.h"
#include "fence/handoff.h"
#include "fence/key_queue.h"
#include "metrics/histogram.h"
#include "net/replies.h"
#include "storage/token_store.h"

namespace fencegate::proxy {

// The verdict of Check for a kFence intent.
struct FenceVerdict {
  bool forward = false;          // true: go on to the upstream while holding `lease`
  std::optional<Reply> reply;    // when !forward: 409 or 503
  // "forwarded" | "stale" | "store_unavailable" | "key_moving" | "overloaded" | "expired"
  std::string outcome;
  uint64_t current = 0;          // stored maximum reported by the store
  std::string shadow_violation;  // shadow mode: what would have been refused
  // Held until the upstream exchange ends; for a write of several keys it
  // holds every one (KeyLease::more) and releases them together.
  KeyLease lease;
  // When forwarding: the request already went upstream on this connection,
  // sent by the thread that handed the key on (Check's whole_request,
  // handoff.h). The session adopts it and reads the response.
  std::optional<HandedConnection> handed;
  // When forwarding: the key's ownership it was decided under
  // (storage::Fence::owner), to check again before it goes upstream.
  int64_t owner = 0;
};

// The name under which a path's node of the tree waits in the KeyQueue: the
// node's own store key (storage::TreeKeyOf), which no token key can be
// spelt as (token_store.h), and which TokenStore::Disown knows.
std::string TreeQueueName(std::string_view path);

class FenceFilter {
 public:
  using Handler = std::function<void(FenceVerdict)>;

  using Clock = std::chrono::steady_clock;

  // `forward_within`: when not zero, an accepted write whose turn comes
  // later than that after its check-and-advance began is refused at its
  // turn, 503 fence_expired (outcome "expired"), not forwarded
  // (storage.etcd.forward_within: replicas on one store, where a replica
  // held up that long may have lost the key to another).
  FenceFilter(storage::TokenStore& store, KeyQueue& queue,
              Clock::duration forward_within = Clock::duration::zero())
      : store_(store), queue_(queue), forward_within_(forward_within) {}

  // The key's turn and the check-and-advance of the write path. `handler`
  // runs on `executor`, once: before Check returns when the calling thread
  // runs `executor`, the key is free and the store answers at once (KeyQueue,
  // RocksDbStore under async), else later. The Advance is made as soon as the
  // write has its place in the key's queue (so it overlaps the exchange of
  // the write ahead; the store decides a key's writes in queue order), and a
  // forward verdict comes only with the key's turn: writes to a key are
  // forwarded one at a time, in order. A refusal (409 stale, 503 store error)
  // comes as soon as the store answers, without waiting for the turn. When
  // the key's queue is full the verdict is a 503 too_many_waiting (outcome
  // "overloaded") at once and nothing reaches the store. In shadow mode the
  // verdict is always forward, in turn; a stale token or a store error is
  // reported in shadow_violation instead. A write that was accepted but whose
  // token is below an admin fence decided while it waited (KeyQueue::Fence,
  // the lease's floor) is refused at its turn: 409 stale, current the fence.
  //
  // With `intent.extra_keys`: one AdvanceAll of the same token for `key` and
  // every extra key, and the write's place in the queues of all of them at
  // once (KeyQueue::AcquireAll); forwarded only when the store accepted every
  // key and the write has the turn on every key; refused whole otherwise
  // (409 names the first stale key and its current value).
  //
  // With `intent.targets` (the tree of paths, docs/contract.md, "Nested
  // resources"): one AdvanceTree of the write's keys and targets, and its
  // place at once in the queues of its keys and of the tree's nodes
  // (TreeQueueName): each target's held kExclusive for a subtree write and
  // kOwn otherwise, each ancestor's kShared; forwarded only when accepted
  // and it has every turn. A refusal is 409 stale_token (a key's, or the
  // tree's under nesting: shared, naming the path) or 409 nested_keys
  // (outcome "nested_keys").
  //
  // `whole_request`, when not empty, is the write's whole upstream request,
  // which must stay unchanged until `handler` runs. A thread that hands the
  // key on to this write from another thread (KeyLease::HandOn with a
  // Courier) then sends it at once, if the store has accepted the write by
  // then (or, in shadow mode, answered), and the verdict carries the
  // connection (FenceVerdict::handed). Not for a write of several keys: its
  // session sends it once it has every turn.
  void Check(const WriteIntent& intent, boost::asio::any_io_executor executor, Handler handler,
             std::string_view whole_request = {});

  size_t max_waiting_per_key() const;

  Clock::duration forward_within() const { return forward_within_; }

  // Whether a write the store decided under `owner` (storage::Fence::owner)
  // may still be forwarded (storage::TokenStore::Forwardable).
  bool Forwardable(int64_t owner) const { return store_.Forwardable(owner); }

  uint64_t shadow_violations() const { return shadow_violations_.load(); }
  void CountShadowViolation() { shadow_violations_.fetch_add(1, std::memory_order_relaxed); }

  // The time of each check-and-advance, from the store call to its answer
  // (fsync and the wait for the store's writer included); the store's
  // answers come on its threads, any of them.
  void RecordAdvance(metrics::LatencyHistogram::Duration d) { advance_duration_.RecordShared(d); }
  const metrics::LatencyHistogram& advance_duration() const { return advance_duration_; }

 private:
  // Check for a write with extra keys.
  void CheckSeveral(const WriteIntent& intent, boost::asio::any_io_executor executor,
                    Handler handler);
  // Check for a write over the tree of paths.
  void CheckTree(const WriteIntent& intent, boost::asio::any_io_executor executor,
                 Handler handler);

  storage::TokenStore& store_;
  KeyQueue& queue_;
  const Clock::duration forward_within_;
  std::atomic<uint64_t> shadow_violations_{0};
  metrics::LatencyHistogram advance_duration_;
};

}  // namespace fencegate::proxy
