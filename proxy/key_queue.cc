#include "proxy/key_queue.h"

#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/prefer.hpp>
#include <utility>

namespace fencegate::proxy {

KeyLease::KeyLease(KeyLease&& other) noexcept
    : queue_(std::exchange(other.queue_, nullptr)),
      key_(std::exchange(other.key_, nullptr)),
      hash_(other.hash_),
      waited_(other.waited_) {}

// NOLINTNEXTLINE(bugprone-exception-escape): terminates if the key cannot be handed on
KeyLease& KeyLease::operator=(KeyLease&& other) noexcept {
  if (this != &other) {
    Release();
    queue_ = std::exchange(other.queue_, nullptr);
    key_ = std::exchange(other.key_, nullptr);
    hash_ = other.hash_;
    waited_ = other.waited_;
  }
  return *this;
}

void KeyLease::Release() {
  if (KeyQueue* q = std::exchange(queue_, nullptr)) q->Release(*key_, hash_, /*dispatch=*/false);
}

void KeyLease::HandOn(Courier* courier) {
  if (KeyQueue* q = std::exchange(queue_, nullptr)) q->Release(*key_, hash_, /*dispatch=*/true, courier);
}

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
      if (bounded && it->second.size() >= max_waiting_per_key_) {
        boost::asio::post(executor, [h = std::move(handler)]() mutable { h(KeyLease()); });
        return;
      }
      auto& waiters = it->second;
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

void KeyQueue::Release(const std::string& key, size_t hash, bool dispatch, Courier* courier) {
  Waiter next;
  Shard& shard = ShardFor(hash);
  const std::string* stored = nullptr;
  {
    std::lock_guard lock(shard.mu);
    auto it = shard.keys.find(HashedKey{key, hash});
    if (it == shard.keys.end()) return;  // unreachable: a lease exists only for a present key
    if (it->second.empty()) {
      Erase(shard, it);
      return;
    }
    stored = &it->first;  // the entry stays: it holds the next waiter's lease now
    next = std::move(it->second.front());
    it->second.pop_front();
    waiting_.fetch_sub(1, std::memory_order_relaxed);
  }
  auto turn = [this, stored, hash, h = std::move(next.handler)]() mutable {
    h(KeyLease(this, stored, hash, /*waited=*/true));
  };
  if (dispatch) {
    // The relay first: what it sends goes before the waiter's turn is
    // posted, so the waiter's thread finds it done.
    if (courier != nullptr && next.relay && RunsElsewhere(next.executor)) {
      // A relay that throws (before it acted: Relay) costs the shortcut,
      // never the waiter's turn.
      try {
        next.relay(*courier);
      } catch (...) {  // NOLINT(bugprone-empty-catch): the turn below is what matters
      }
    }
    return boost::asio::dispatch(next.executor, std::move(turn));
  }
  boost::asio::post(next.executor, std::move(turn));
}

KeyQueue::Shard::Map::iterator KeyQueue::Insert(Shard& shard, std::string_view key) {
  if (shard.spare.empty()) return shard.keys.try_emplace(std::string(key)).first;
  Shard::Map::node_type node = std::move(shard.spare.back());
  shard.spare.pop_back();
  node.key().assign(key);  // within its capacity: no allocation
  return shard.keys.insert(std::move(node)).position;
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
