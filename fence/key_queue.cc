#include "fence/key_queue.h"

#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/prefer.hpp>
#include <boost/container/small_vector.hpp>
#include <algorithm>
#include <cassert>
#include <utility>

namespace fencegate::proxy {

KeyLease::KeyLease(KeyLease&& other) noexcept
    : queue_(std::exchange(other.queue_, nullptr)),
      key_(std::exchange(other.key_, nullptr)),
      hash_(other.hash_),
      waited_(other.waited_),
      hold_(other.hold_),
      floor_(other.floor_),
      more_(std::exchange(other.more_, nullptr)) {}

// NOLINTNEXTLINE(bugprone-exception-escape): terminates if the key cannot be handed on
KeyLease& KeyLease::operator=(KeyLease&& other) noexcept {
  if (this != &other) {
    Release();
    queue_ = std::exchange(other.queue_, nullptr);
    key_ = std::exchange(other.key_, nullptr);
    hash_ = other.hash_;
    waited_ = other.waited_;
    hold_ = other.hold_;
    floor_ = other.floor_;
    more_ = std::exchange(other.more_, nullptr);  // this one's went with Release()
  }
  return *this;
}

void KeyLease::ReleaseHeld() {
  if (more_ != nullptr) {
    // Out of the lease first: what a release runs never finds it half-released.
    std::unique_ptr<std::vector<KeyLease>> more(std::exchange(more_, nullptr));
    for (KeyLease& lease : *more) lease.Release();
  }
  std::exchange(queue_, nullptr)->Release(*key_, hash_, hold_, /*dispatch=*/false);
}

void KeyLease::HandOn(Courier* courier) {
  if (more_ != nullptr) {
    std::unique_ptr<std::vector<KeyLease>> more(std::exchange(more_, nullptr));
    for (KeyLease& lease : *more) lease.HandOn(courier);
  }
  if (KeyQueue* q = std::exchange(queue_, nullptr)) {
    q->Release(*key_, hash_, hold_, /*dispatch=*/true, courier);
  }
}

// An AcquireAll caller until its turn came on every key.
struct KeyQueue::Group {
  // Tracks outstanding work, as a Waiter's does.
  boost::asio::any_io_executor executor;
  Handler handler;
  std::vector<KeyLease> leases;  // per key, in the caller's order, as each turn comes
  // Keys whose turn has not come yet; whoever takes it to 0 completes.
  std::atomic<size_t> missing{0};
};

namespace {

// True only when `executor` is known to run on another thread than this
// one: an io_context's executor (the I/O threads'), tracked or not, whose
// io_context this thread is not running. Any other executor: false.
bool RunsElsewhere(const boost::asio::any_io_executor& executor) {
  using Plain = boost::asio::io_context::executor_type;
  using Tracked = decltype(boost::asio::prefer(std::declval<Plain>(),
                                               boost::asio::execution::outstanding_work.tracked));
  if (const auto* e = executor.target<Tracked>()) return !e->running_in_this_thread();
  if (const auto* e = executor.target<Plain>()) return !e->running_in_this_thread();
  return false;
}

// Runs on_queued; if it throws, `undo` gives the caller's place back first.
template <class Undo>
void RunOnQueued(const std::function<void()>& on_queued, Undo undo) {
  if (!on_queued) return;
  try {
    on_queued();
  } catch (...) {  // nobody would ever use the place
    undo();
    throw;
  }
}

}  // namespace

void KeyQueue::Acquire(const std::string& key, boost::asio::any_io_executor executor,
                       Handler handler, bool bounded, const std::function<void()>& on_queued,
                       Relay relay) {
  const size_t hash = HashOf(key);
  Shard& shard = ShardFor(hash);
  const std::string* stored = nullptr;  // the map's copy: see KeyLease
  {
    std::lock_guard lock(shard.mu);
    auto it = shard.keys.find(HashedKey{key, hash});
    const bool inserted = it == shard.keys.end();
    if (inserted) it = Insert(shard, key);
    stored = &it->first;
    if (!inserted) {
      if (bounded && it->second.waiters.size() >= max_waiting_per_key_) {
        boost::asio::post(executor, [h = std::move(handler)]() mutable { h(KeyLease()); });
        return;
      }
      auto& waiters = it->second.waiters;
      waiters.push_back(Waiter{
          boost::asio::prefer(executor, boost::asio::execution::outstanding_work.tracked),
          std::move(handler), std::move(relay)});
      RunOnQueued(on_queued, [&waiters] { waiters.pop_back(); });
      waiting_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    RunOnQueued(on_queued, [&shard, it = it] { Erase(shard, it); });
  }
  boost::asio::dispatch(executor, [this, stored, hash, h = std::move(handler)]() mutable {
    h(KeyLease(this, stored, hash, /*waited=*/false));
  });
}

void KeyQueue::Release(const std::string& key, size_t hash, Hold hold, bool dispatch,
                       Courier* courier) {
  // Whom the release lets in: the waiters at the front of the queue, in
  // order, as long as each is granted beside the holders left (one, unless
  // entries of the tree hold it shared).
  boost::container::small_vector<Waiter, 1> next;
  Shard& shard = ShardFor(hash);
  const std::string* stored = nullptr;
  uint64_t floor = 0;
  {
    std::lock_guard lock(shard.mu);
    auto it = shard.keys.find(HashedKey{key, hash});
    if (it == shard.keys.end()) return;  // unreachable: a lease exists only for a present key
    Shard::Entry& entry = it->second;
    entry.Drop(hold);
    auto& waiters = entry.waiters;
    size_t counted = 0;
    while (!waiters.empty() && entry.Grants(waiters.front().hold)) {
      entry.Take(waiters.front().hold);
      counted += waiters.front().counted ? 1 : 0;
      next.push_back(std::move(waiters.front()));
      waiters.pop_front();
    }
    if (next.empty()) {
      if (!entry.Held()) {
        if (on_idle_) on_idle_(it->first);
        Erase(shard, it);
      }
      return;
    }
    waiting_.fetch_sub(counted, std::memory_order_relaxed);
    stored = &it->first;  // the entry stays: it holds the next waiters' leases now
    floor = entry.floor;
  }
  for (Waiter& w : next) {
    auto turn = [this, stored, hash, floor, hold = w.hold, h = std::move(w.handler)]() mutable {
      h(KeyLease(this, stored, hash, /*waited=*/true, floor, hold));
    };
    if (!dispatch) {
      boost::asio::post(w.executor, std::move(turn));
      continue;
    }
    // The relay first: what it sends goes before the waiter's turn is
    // posted, so the waiter's thread finds it done. Not past a floor: the
    // write may be refused at its turn, and must then not have been sent.
    if (courier != nullptr && w.relay && floor == 0 && RunsElsewhere(w.executor)) {
      // A relay that throws (before it acted: Relay) costs the shortcut,
      // never the waiter's turn.
      try {
        w.relay(*courier);
      } catch (...) {  // NOLINT(bugprone-empty-catch): the turn below is what matters
      }
    }
    boost::asio::dispatch(w.executor, std::move(turn));
  }
}

void KeyQueue::AcquireAll(const std::string& key, std::span<const std::string> more_keys,
                          std::span<const Hold> holds, boost::asio::any_io_executor executor,
                          Handler handler, bool bounded, const std::function<void()>& on_queued) {
  const size_t n = more_keys.size() + 1;
  assert((holds.empty() || holds.size() == n) && "AcquireAll: one hold per key");
  auto hold_at = [&](size_t i) { return holds.empty() ? Hold::kExclusive : holds[i]; };
  if (more_keys.empty() && hold_at(0) == Hold::kExclusive) {
    return Acquire(key, std::move(executor), std::move(handler), bounded, on_queued);
  }
  auto key_at = [&](size_t i) -> const std::string& { return i == 0 ? key : more_keys[i - 1]; };
  boost::container::small_vector<size_t, 4> hashes(n);
  boost::container::small_vector<size_t, 4> shards;
  for (size_t i = 0; i < n; ++i) {
    hashes[i] = HashOf(key_at(i));
    shards.push_back(hashes[i] % kShards);
    for (size_t j = 0; j < i; ++j) {
      assert(key_at(j) != key_at(i) && "AcquireAll: keys must be distinct");
    }
  }
  // Ascending shard order, each once: any two callers take the locks they
  // share in the same order.
  std::sort(shards.begin(), shards.end());
  shards.erase(std::unique(shards.begin(), shards.end()), shards.end());

  auto group = std::make_shared<Group>();
  group->executor = boost::asio::prefer(executor, boost::asio::execution::outstanding_work.tracked);
  group->handler = std::move(handler);
  group->leases.resize(n);
  bool complete = false;
  {
    boost::container::small_vector<std::unique_lock<std::mutex>, 4> locks;
    for (size_t s : shards) locks.emplace_back(shards_[s].mu);
    // Bounded: refused whole, before any place is taken.
    if (bounded) {
      for (size_t i = 0; i < n; ++i) {
        if (hold_at(i) == Hold::kShared) continue;
        Shard& shard = ShardFor(hashes[i]);
        auto it = shard.keys.find(HashedKey{key_at(i), hashes[i]});
        if (it != shard.keys.end() && it->second.waiters.size() >= max_waiting_per_key_) {
          boost::asio::post(executor, [h = std::move(group->handler)]() mutable { h(KeyLease()); });
          return;
        }
      }
    }
    // Each key: the caller holds it now (a free key) or waits in its queue.
    // Entries by address: a later key's insert into the same shard may
    // rehash its map, which moves no entry but invalidates iterators.
    enum class Got { kInserted, kGranted, kWaiting };
    struct Place {
      Shard::Entry* entry;
      Got got;
    };
    boost::container::small_vector<Place, 4> places;
    size_t missing = 0;
    for (size_t i = 0; i < n; ++i) {
      Shard& shard = ShardFor(hashes[i]);
      const Hold hold = hold_at(i);
      auto it = shard.keys.find(HashedKey{key_at(i), hashes[i]});
      Got got = Got::kWaiting;
      if (it == shard.keys.end()) {
        it = Insert(shard, key_at(i), hold);
        got = Got::kInserted;
      } else if (it->second.waiters.empty() && it->second.Grants(hold)) {
        it->second.Take(hold);  // beside the holders, none of them waiting
        got = Got::kGranted;
      }
      if (got != Got::kWaiting) {
        group->leases[i] = KeyLease(this, &it->first, hashes[i], /*waited=*/false, 0, hold);
      } else {
        it->second.waiters.push_back(
            Waiter{group->executor,
                   [this, group, i](KeyLease lease) {
                     // The turn on key i, on the caller's executor.
                     group->leases[i] = std::move(lease);
                     if (group->missing.fetch_sub(1, std::memory_order_acq_rel) == 1) {
                       waiting_.fetch_sub(1, std::memory_order_relaxed);
                       Complete(group, /*on_executor=*/true);
                     }
                   },
                   {},
                   hold,
                   /*counted=*/false});
        ++missing;
      }
      places.push_back(Place{&it->second, got});
    }
    group->missing.store(missing, std::memory_order_relaxed);
    RunOnQueued(on_queued, [&] {
      for (size_t i = n; i-- > 0;) {
        if (places[i].got == Got::kWaiting) {
          places[i].entry->waiters.pop_back();
          continue;
        }
        // Not released through the lease: that would take the lock again.
        // Nobody queued behind this caller meanwhile (the locks are held).
        group->leases[i].queue_ = nullptr;
        places[i].entry->Drop(hold_at(i));
        if (!places[i].entry->Held()) {
          Shard& shard = ShardFor(hashes[i]);
          Erase(shard, shard.keys.find(HashedKey{key_at(i), hashes[i]}));
        }
      }
    });
    if (missing > 0) waiting_.fetch_add(1, std::memory_order_relaxed);
    complete = missing == 0;
  }
  // Every key was free: the caller's turn, as Acquire gives a free key's.
  if (complete) Complete(group, /*on_executor=*/false);
}

void KeyQueue::Complete(const std::shared_ptr<Group>& group, bool on_executor) {
  // The floors as of the turn on every key: a fence decided while this
  // caller held one key and waited for another stops it too.
  bool waited = false;
  for (KeyLease& lease : group->leases) {
    Shard& shard = ShardFor(lease.hash_);
    std::lock_guard lock(shard.mu);
    auto it = shard.keys.find(HashedKey{*lease.key_, lease.hash_});
    if (it != shard.keys.end()) lease.floor_ = it->second.floor;  // present: the lease holds it
    waited = waited || lease.waited_;
  }
  KeyLease whole = std::move(group->leases[0]);
  whole.waited_ = waited;
  auto more = std::make_unique<std::vector<KeyLease>>();
  more->reserve(group->leases.size() - 1);
  for (size_t i = 1; i < group->leases.size(); ++i) more->push_back(std::move(group->leases[i]));
  whole.more_ = more.release();  // whole holds its first key: its release frees them
  if (on_executor) {
    Handler h = std::move(group->handler);
    return h(std::move(whole));
  }
  boost::asio::dispatch(
      group->executor,
      [h = std::move(group->handler), whole = std::move(whole)]() mutable { h(std::move(whole)); });
}

void KeyQueue::Fence(const std::string& key, uint64_t token,
                     const std::function<void()>& on_queued) {
  const size_t hash = HashOf(key);
  Shard& shard = ShardFor(hash);
  std::lock_guard lock(shard.mu);
  if (auto it = shard.keys.find(HashedKey{key, hash}); it != shard.keys.end()) {
    it->second.floor = std::max(it->second.floor, token);
  }
  // A floor raised for a Raise that then throws only refuses writes whose
  // tokens the store would have refused had the Raise been made.
  if (on_queued) on_queued();
}

KeyQueue::Shard::Map::iterator KeyQueue::Insert(Shard& shard, std::string_view key, Hold hold) {
  Shard::Map::iterator it;
  if (shard.spare.empty()) {
    it = shard.keys.try_emplace(std::string(key)).first;
  } else {
    Shard::Map::node_type node = std::move(shard.spare.back());
    shard.spare.pop_back();
    node.key().assign(key);  // within its capacity: no allocation
    node.mapped().floor = 0;  // the floor of the key it held went with it
    it = shard.keys.insert(std::move(node)).position;
  }
  Shard::Entry& entry = it->second;
  entry.exclusive = false;
  entry.own = false;
  entry.shared = 0;
  entry.Take(hold);
  return it;
}

void KeyQueue::Erase(Shard& shard, Shard::Map::iterator it) {
  if (shard.spare.size() == kSpareEntries) {
    shard.keys.erase(it);
    return;
  }
  shard.spare.push_back(shard.keys.extract(it));  // reserved: does not allocate
}

size_t KeyQueue::active_keys() const {
  size_t n = 0;
  for (const Shard& shard : shards_) {
    std::lock_guard lock(shard.mu);
    n += shard.keys.size();
  }
  return n;
}

}  // namespace fencegate::proxy
