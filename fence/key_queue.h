#pragma once
// KeyQueue: per-key FIFO mutual exclusion for fenced writes (the wait for the
// key's turn in docs/contract.md, "The write path"). A write to key K
// proceeds only when the previous accepted write to K has completed or
// failed; writes to different keys never wait on each other. Waiters are
// resumed in arrival order, each on its own executor.
//
// Thread-safe. A KeyLease is the right to run the write: releasing it (by
// destruction or Release()) hands the key to the next waiter. Keys are
// spread over kShards shards, each with its own lock, so that threads
// working on different keys seldom wait for each other (see on_queued).
//
// The number of writes that may wait behind one key is bounded (a client
// must not be able to park unbounded work on a hot key): beyond the bound,
// Acquire refuses and the handler runs at once with an empty lease.
//
// A write of several keys (AcquireAll) takes its place in the queues of all
// of them at once, and runs once it has the turn on every one. It may hold
// some of them shared with others (KeyQueue::Hold): the tree of paths
// (docs/contract.md, "Nested resources") queues a write on the node of each
// path it changes and, shared, on each ancestor's, so that a subtree write
// waits for every write below it and they for it. The admin
// fence (Fence) leaves a floor on a busy key's queue that writes already
// queued learn at their turn (KeyLease::floor).

#include <boost/asio/any_io_executor.hpp>
#include <array>
#include <atomic>
#include <cstddef>
#include <list>
#include <functional>
#include <memory>
#include <limits>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "fence/handoff.h"

namespace fencegate::proxy {

class KeyQueue;

// How a lease holds its entry. A key's writes hold it exclusively, one at a
// time. A node of the tree: a write to the path itself that changes only
// it holds kOwn (one at a time, beside any number of writes below); a write
// below holds kShared (many at once); a subtree write holds kExclusive.
enum class Hold : uint8_t { kExclusive, kOwn, kShared };

class KeyLease {
 public:
  KeyLease() = default;
  KeyLease(KeyLease&& other) noexcept;
  // Releasing hands the key on, which locks a mutex and posts the next
  // waiter (an allocation). If that throws, std::terminate is the intended
  // outcome: a key that cannot be handed on would stall its writers forever.
  KeyLease& operator=(KeyLease&& other) noexcept;  // NOLINT(bugprone-exception-escape)
  KeyLease(const KeyLease&) = delete;
  KeyLease& operator=(const KeyLease&) = delete;
  ~KeyLease() { Release(); }  // NOLINT(bugprone-exception-escape): see operator=

  // Inline: most leases released are moved-from ones, which hold nothing.
  void Release() {
    if (queue_ != nullptr) ReleaseHeld();
  }
  // Releases as Release() does, except that when the next waiter's executor
  // runs on the calling thread, its handler runs before HandOn returns
  // (dispatch) rather than after everything the event loop has queued
  // (post). For a hot key that is the next write on its way to the backend
  // before this one's response goes to its client. Call it only where
  // another session's handler may safely run: no lock held, and nothing of
  // the caller's that the handler reaches is half-changed.
  // With a `courier`, when the next waiter runs on another thread and gave
  // a relay (KeyQueue::Acquire), the relay runs here first, before its turn
  // is posted: it may have the courier send its request upstream now; not
  // when an admin fence left a floor on the key (the waiter may have to be
  // refused at its turn).
  // A lease of several keys (AcquireAll) releases and hands on every one.
  void HandOn(Courier* courier = nullptr);
  bool held() const { return queue_ != nullptr; }
  // The write waited behind another write of its key (the key was busy when
  // it asked): how a session learns that its key is contended. Several
  // keys: behind a write of any of them.
  bool waited() const { return waited_; }
  // The highest admin fence (KeyQueue::Fence) decided on the key while this
  // write waited in its queue, as of its turn; 0 when none. A write whose
  // token is lower must not be forwarded. Several keys: this lease's key's
  // (see more()), as of the turn on the last of them.
  uint64_t floor() const { return floor_; }
  // A lease of several keys (AcquireAll): the leases of the further keys,
  // in the caller's order, held and released with this one. Empty for one
  // key.
  std::span<const KeyLease> more() const {
    return more_ != nullptr ? std::span<const KeyLease>(*more_) : std::span<const KeyLease>();
  }

 private:
  friend class KeyQueue;
  // `key` is the key as stored in the queue's map, whose entry lives while
  // a lease on it is held (only the holder's release erases it): the lease
  // points to it rather than copying it.
  // `hash` is the key's KeyQueue::HashOf, kept so that a release hashes
  // nothing.
  KeyLease(KeyQueue* queue, const std::string* key, size_t hash, bool waited, uint64_t floor = 0,
           Hold hold = Hold::kExclusive)
      : queue_(queue), key_(key), hash_(hash), waited_(waited), hold_(hold), floor_(floor) {}
  void ReleaseHeld();
  KeyQueue* queue_ = nullptr;
  const std::string* key_ = nullptr;
  size_t hash_ = 0;
  bool waited_ = false;
  Hold hold_ = Hold::kExclusive;
  uint64_t floor_ = 0;
  // The further keys of an AcquireAll, owned; null (nothing allocated) for
  // one key. Set only while queue_ is (a lease of several keys holds its
  // first), and freed by the release: a one-key lease's move and
  // destruction then cost no more than one pointer's, and it stays small
  // enough to be inlined on the fenced write path.
  std::vector<KeyLease>* more_ = nullptr;
};

class KeyQueue {
 public:
  using Handler = std::function<void(KeyLease)>;
  // A waiter's use of a Courier (handoff.h): runs on the thread that hands
  // the key on, when that is not the waiter's thread, just before the
  // waiter's turn is posted to it. No lock is held. It may throw only
  // before it has acted: the exception is dropped and the turn still goes.
  using Relay = std::function<void(Courier&)>;

  explicit KeyQueue(size_t max_waiting_per_key = std::numeric_limits<size_t>::max())
      : max_waiting_per_key_(max_waiting_per_key) {}

  // Runs `handler` with the lease for `key` as soon as no earlier caller
  // holds or waits for it, on `executor`. When the key is free and the
  // calling thread is the one running `executor` (an I/O thread acquiring
  // for its own session), the handler runs before Acquire returns, after
  // the queue's lock is released: no trip through the event loop for the
  // common case of a key nobody else is writing. Otherwise it is posted.
  // So a caller must not hold a lock the handler takes.
  // When `bounded` and max_waiting_per_key writes already wait for `key`,
  // the handler is posted at once with an empty lease (!lease.held()): the
  // caller refuses. A waiter's turn is posted by KeyLease::Release, and
  // dispatched by KeyLease::HandOn. Unbounded callers (shadow mode, which
  // never refuses) always queue.
  //
  // `on_queued`, when given, runs inside Acquire, under the queue's lock,
  // once the caller has its place (never when refused). Two callers of one
  // key therefore run their on_queued in the same order as they will get the
  // key: the fence filter enqueues its store Advance there, so that the
  // store decides a key's writes in the order they will be forwarded. It
  // must be short and must not call back into this queue. It holds the lock
  // of the key's shard: under async durability the RocksDB store decides an
  // Advance there on the calling thread when it is idle (a memtable read and
  // a WAL append, microseconds), and other threads' Acquire/Release of keys
  // in the same shard wait for it; keys in other shards do not.
  //
  // `relay`, when given, is kept with a waiting caller for KeyLease::HandOn
  // with a courier: see there. It never runs for a caller that did not wait,
  // nor when the key is handed on by Release or on the waiter's own thread.
  void Acquire(const std::string& key, boost::asio::any_io_executor executor, Handler handler,
               bool bounded = true, const std::function<void()>& on_queued = {},
               Relay relay = {});

  // Acquire for a write of several keys, `key` and `more_keys` (distinct):
  // the caller takes its place in the queue of every key at once, under the
  // locks of all their shards (taken in ascending shard order, so two
  // callers never wait for each other's locks), runs `on_queued` once under
  // them, and gets one lease (its more() holds the further keys) on
  // `executor` once it has the turn on every key; posted, or dispatched as
  // for one key. Because places are taken atomically, any two callers that
  // share keys are in the same order in each shared key's queue, and FIFO
  // queues then cannot wait on each other in a cycle: no deadlock. Each
  // key's writes still go one at a time, in queue order. When `bounded` and
  // any key already has max_waiting_per_key writes waiting, the caller
  // takes no place anywhere, on_queued does not run, and the handler is
  // posted with an empty lease. A key whose turn comes before the others'
  // is held meanwhile (writes queued behind it wait). No relay: a write of
  // several keys is sent by its own session. With no more_keys, as Acquire.
  void AcquireAll(const std::string& key, std::span<const std::string> more_keys,
                  boost::asio::any_io_executor executor, Handler handler, bool bounded = true,
                  const std::function<void()>& on_queued = {}) {
    AcquireAll(key, more_keys, {}, std::move(executor), std::move(handler), bounded, on_queued);
  }
  // AcquireAll with a Hold per key (`holds`: `key`'s, then each of
  // `more_keys`'; empty: all exclusive). An entry held kShared is granted
  // beside other kShared and kOwn holders, kOwn beside kShared ones; each
  // entry grants strictly in queue order (a waiter never passes an earlier
  // one), so the order argument above still holds. The bound applies to
  // the entries a caller would hold kExclusive or kOwn only: writes below a
  // busy collection may queue behind it in any number (each holds a
  // connection, which limits.max_connections bounds).
  void AcquireAll(const std::string& key, std::span<const std::string> more_keys,
                  std::span<const Hold> holds, boost::asio::any_io_executor executor,
                  Handler handler, bool bounded = true,
                  const std::function<void()>& on_queued = {});

  // The admin fence as a barrier (docs/contract.md, "Admin API"). Under the
  // lock of the key's shard: if any write holds or waits for the key, raises
  // the key's floor to at least `token`, then runs `on_queued` (the store's
  // Raise) before letting go. Every write whose store decision came before
  // that Raise has its place in the key's queue already, and each one that
  // gets its turn from now on learns the floor (KeyLease::floor) and is
  // refused if its token is lower; every write placed later is decided after
  // the Raise, by the store. The one write that already holds the key's turn
  // when the fence is decided is not stopped: it may still reach the backend
  // (at most one per key, since a key's writes go one at a time). Does not
  // wait for the key's turn. The floor goes with the key's entry once no
  // write holds or waits for it. It stays if the Raise then fails: the writes
  // it outranks were queued before the fence, which meant to stop them, and a
  // retried fence stores it. on_queued: as for Acquire.
  void Fence(const std::string& key, uint64_t token, const std::function<void()>& on_queued);

  size_t max_waiting_per_key() const { return max_waiting_per_key_; }

  // Called with a key's name when its last write lets it go and none waits
  // (storage::TokenStore::Disown), under the lock of its shard: it must be
  // short and must not call back into this queue. Set before the queue is
  // used.
  using IdleHook = std::function<void(std::string_view)>;
  void SetIdleHook(IdleHook hook) { on_idle_ = std::move(hook); }

  // Number of writes waiting behind another write on one of their keys (a
  // write of several keys counts once).
  size_t waiting() const { return waiting_.load(std::memory_order_relaxed); }
  // Number of keys with a write in flight.
  size_t active_keys() const;

  static constexpr size_t kShards = 64;
  // The shard that holds `key` (tests use it to pick keys of two shards).
  static size_t ShardOf(const std::string& key) { return HashOf(key) % kShards; }
  // The key's hash: picks its shard and its bucket in the shard's map.
  static size_t HashOf(std::string_view key) { return std::hash<std::string_view>{}(key); }

 private:
  friend class KeyLease;
  struct Group;
  struct Waiter {
    // Tracks outstanding work, so the executor's io_context keeps running
    // while a write waits for its key.
    boost::asio::any_io_executor executor;
    Handler handler;
    Relay relay;
    Hold hold = Hold::kExclusive;
    // Counted in waiting() by itself (Acquire's); an AcquireAll caller is
    // counted once, however many of its keys it waits for.
    bool counted = true;
  };
  // dispatch: HandOn; courier: HandOn's.
  void Release(const std::string& key, size_t hash, Hold hold, bool dispatch,
               Courier* courier = nullptr);
  // An AcquireAll caller whose turn came on every key: each key's floor as
  // of now, then its handler with the whole lease. Locks one shard at a
  // time; holds none when called.
  void Complete(const std::shared_ptr<Group>& group, bool on_executor);

  // A key with its hash (HashOf), computed once per Acquire or Release for
  // both the shard and the lookup in its map, which takes it in place of a
  // std::string (C++20 heterogeneous lookup): a lookup hashes nothing more
  // and goes straight to the key's bucket (docs/architecture.md, "The key
  // queue", says why that matters).
  struct HashedKey {
    std::string_view key;
    size_t hash;
  };
  struct KeyHash {
    using is_transparent = void;
    // Not noexcept, on purpose: libstdc++ then keeps each entry's hash in
    // its node, so rehashing and extracting an entry never hash a key again.
    size_t operator()(const std::string& key) const { return HashOf(key); }
    size_t operator()(const HashedKey& key) const { return key.hash; }
  };
  struct KeyEqual {
    using is_transparent = void;
    bool operator()(const std::string& a, const std::string& b) const { return a == b; }
    bool operator()(const HashedKey& a, const std::string& b) const { return a.key == b; }
    bool operator()(const std::string& a, const HashedKey& b) const { return a == b.key; }
  };

  static constexpr size_t kSpareEntries = 2;  // per shard: see Shard::spare
  IdleHook on_idle_;

  // Its own cache line each, so that two threads locking neighbouring shards
  // do not share one.
  struct alignas(64) Shard {
    mutable std::mutex mu;
    // Present while a lease on the key is held; `waiters` holds later
    // callers. A list, not a deque: an empty std::list allocates nothing,
    // and most keys never have a waiter (libstdc++'s deque allocates on
    // construction). `floor`: the highest admin fence decided while the
    // entry was present (Fence).
    // The holders: one kExclusive, or kShared ones and at most one kOwn
    // (a key's entry is only ever held kExclusive).
    struct Entry {
      std::list<Waiter> waiters;
      uint64_t floor = 0;
      uint32_t shared = 0;
      bool own = false;
      bool exclusive = true;  // a new entry is its inserter's, exclusively

      bool Grants(Hold h) const {
        if (exclusive) return false;
        if (h == Hold::kExclusive) return shared == 0 && !own;
        return h == Hold::kShared || !own;
      }
      void Take(Hold h) {
        if (h == Hold::kExclusive) exclusive = true;
        if (h == Hold::kOwn) own = true;
        if (h == Hold::kShared) ++shared;
      }
      void Drop(Hold h) {
        if (h == Hold::kExclusive) exclusive = false;
        if (h == Hold::kOwn) own = false;
        if (h == Hold::kShared) --shared;
      }
      bool Held() const { return exclusive || own || shared > 0; }
    };
    using Map = std::unordered_map<std::string, Entry, KeyHash, KeyEqual>;
    Map keys;  // guarded by mu
    // Entries of released keys kept for the next new key of this shard
    // (their key strings keep their capacity): a free key's acquire and
    // release then allocate nothing. At most kSpareEntries; guarded by mu.
    std::vector<Map::node_type> spare;
    Shard() { spare.reserve(kSpareEntries); }
  };
  Shard& ShardFor(size_t hash) { return shards_[hash % kShards]; }
  // Adds `key` (absent) to the shard, held by its inserter with `hold`, in a
  // spare entry when there is one; Erase keeps the entry as a spare while
  // there is room. Both under mu.
  static Shard::Map::iterator Insert(Shard& shard, std::string_view key,
                                     Hold hold = Hold::kExclusive);
  static void Erase(Shard& shard, Shard::Map::iterator it);

  const size_t max_waiting_per_key_;
  std::array<Shard, kShards> shards_;
  std::atomic<size_t> waiting_{0};
};

}  // namespace fencegate::proxy
