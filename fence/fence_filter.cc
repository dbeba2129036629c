#include "fence/fence_filter.h"

#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/prefer.hpp>
#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>

namespace fencegate::proxy {

namespace {

// One fenced write between Check() and its verdict. Two things must both
// arrive before a write may be forwarded: its turn on the key (the lease,
// delivered on the caller's executor) and the store's answer (on the store's
// thread), in either order. A refusal needs only the answer.
struct PendingFence {
  PendingFence(FenceFilter& f, const WriteIntent& intent,
               boost::asio::any_io_executor ex, FenceFilter::Handler h)
      : filter(f),
        key(intent.key),
        token(intent.token),
        shadow(intent.shadow),
        executor(std::move(ex)),
        handler(std::move(h)) {}

  FenceFilter& filter;
  const std::string key;
  const uint64_t token;
  const bool shadow;
  // Tracks outstanding work: the io_context keeps running until the verdict
  // is delivered (shutdown waits for it).
  const boost::asio::any_io_executor executor;
  FenceFilter::Handler handler;  // moved out by Deliver

  std::mutex mu;
  KeyLease lease;            // guarded by mu; held once the turn came
  bool answered = false;     // guarded by mu; status and fence are set
  bool delivered = false;    // guarded by mu; Deliver ran or is posted
  storage::Status status;    // guarded by mu until delivered
  storage::Fence fence;      // guarded by mu until delivered
  // A write of several keys (CheckSeveral): what one key's write does not
  // need, kept apart, so that a one-key write's PendingFence does not carry it.
  struct SeveralKeys {
    std::vector<std::string> extra_keys;  // set before the store call, then read only
    // The store's BatchFence, `fence` holding its verdict and the current
    // value of the key it names (the first stale one, else `key`). Guarded
    // as `fence` is.
    std::vector<uint64_t> currents;  // per key: key, then extra_keys
    size_t stale = 0;                // index of the refused key
  };
  std::unique_ptr<SeveralKeys> several;  // null for one key
  // A write over the tree of paths (CheckTree): its verdict (guarded as
  // `fence` is) and targets, for the reply of a refusal. Null otherwise.
  struct Tree {
    std::vector<storage::TreeTarget> targets;  // set before the store call, then read only
    storage::TreeVerdict verdict;
  };
  std::unique_ptr<Tree> tree;
  // Check's relay: written, without mu, on the thread that hands the key on,
  // before the turn is posted; read by Deliver, which runs after that turn.
  std::optional<HandedConnection> handed;
  std::string_view whole_request;  // Check's, for the relay

  // The store's handler holds a plain pointer (a std::function keeps that
  // in place; a shared_ptr it would allocate for): this keeps the fence
  // alive until the answer. Set before the Advance, moved out by the
  // answer, which the store gives exactly once (token_store.h).
  std::shared_ptr<PendingFence> until_answered;
  // When the Advance (AdvanceAll) was made (set before the store call, then
  // read only): its answer records the time (FenceFilter::advance_duration),
  // and forward_within counts from it.
  std::chrono::steady_clock::time_point advance_started;

  // A refusal (stale token, store error) is answered without waiting for the
  // key's turn: nothing will be forwarded. Shadow mode forwards those too.
  bool RefusedLocked() const { return !shadow && (!status.ok() || !fence.accepted); }

  const std::string& KeyAt(size_t i) const { return i == 0 ? key : several->extra_keys[i - 1]; }

  // How long the write waited since its check-and-advance began, when that
  // is more than forward_within; zero otherwise (and with no limit).
  FenceFilter::Clock::duration Overdue() const {
    const FenceFilter::Clock::duration limit = filter.forward_within();
    if (limit == FenceFilter::Clock::duration::zero()) return limit;
    const FenceFilter::Clock::duration waited = FenceFilter::Clock::now() - advance_started;
    return waited > limit ? waited : FenceFilter::Clock::duration::zero();
  }

  // On the executor, once delivered was set: builds the verdict and runs the
  // handler. After `delivered`, no other thread touches the fields it reads.
  void Deliver() {
    FenceVerdict v;
    v.lease = std::move(lease);
    v.current = fence.current;
    size_t fenced = 0;  // 1 + the index of a key whose floor is above the token
    if (status.ok() && fence.accepted && v.lease.held()) fenced = FencedKey(v.lease);
    if (!status.ok()) {
      v.outcome = status.code() == storage::Status::Code::kMoving ? "key_moving"
                                                                  : "store_unavailable";
      v.reply = MakeStoreError(status);
    } else if (!fence.accepted && tree) {
      TreeRefusal(v);
    } else if (!fence.accepted) {
      v.outcome = "stale";
      v.reply = MakeStale(KeyAt(several ? several->stale : 0), token, fence.current);
    } else if (fenced > 0) {
      // Accepted before an admin fence that was decided while it waited:
      // the fence is a barrier (docs/contract.md, "Admin API"), so it never
      // goes.
      const size_t i = fenced - 1;
      const KeyLease& held = i == 0 ? v.lease : v.lease.more()[i - 1];
      const uint64_t stored = several ? several->currents[i] : fence.current;
      v.current = std::max(held.floor(), stored);
      v.outcome = "stale";
      v.reply = MakeStale(KeyAt(i), token, v.current);
    } else if (const auto overdue = Overdue(); overdue != FenceFilter::Clock::duration::zero()) {
      v.outcome = "expired";
      v.reply = MakeExpired(overdue);
    } else if (!filter.Forwardable(fence.owner)) {
      v.outcome = "expired";
      v.reply = MakeOwnershipLapsed(key);
    } else {
      v.outcome = "forwarded";
      v.forward = true;
    }
    v.handed = std::move(handed);  // only ever set for a write that is forwarded
    v.owner = fence.owner;
    if (shadow && !v.forward) {
      v.shadow_violation = v.outcome;
      filter.CountShadowViolation();
      v.forward = true;
      v.reply.reset();
      v.outcome = "forwarded";
    }
    if (!v.forward) v.lease.Release();  // nothing will be forwarded
    FenceFilter::Handler h = std::move(handler);
    h(std::move(v));
  }

  // The reply of a write the tree refused (Deliver).
  void TreeRefusal(FenceVerdict& v) const {
    const storage::TreeVerdict& t = tree->verdict;
    const auto target = std::find_if(tree->targets.begin(), tree->targets.end(),
                                     [&t](const storage::TreeTarget& x) { return x.path == t.target; });
    const bool covered = target != tree->targets.end() &&
                         target->nesting != storage::Nesting::kUncovered;
    switch (t.kind) {
      case storage::TreeVerdict::Kind::kNestedKeys:
        v.outcome = "nested_keys";
        v.reply = MakeNestedKeys(t.target, t.path, t.key, covered);
        return;
      case storage::TreeVerdict::Kind::kStaleTree:
        v.outcome = "stale";
        v.current = t.tree_token;
        v.reply = MakeStaleTree(covered ? target->key : key, t.target, t.path, token, t.tree_token);
        return;
      case storage::TreeVerdict::Kind::kStaleKey:
      case storage::TreeVerdict::Kind::kAccepted:  // not refused: never here
        break;
    }
    v.outcome = "stale";
    v.reply = MakeStale(KeyAt(several->stale), token, fence.current);
  }

  Reply MakeExpired(FenceFilter::Clock::duration waited) const {
    using std::chrono::duration_cast;
    using std::chrono::milliseconds;
    const auto ms = [](FenceFilter::Clock::duration d) {
      return std::to_string(duration_cast<milliseconds>(d).count()) + " ms";
    };
    Reply r = MakeError(
        http::status::service_unavailable, "fence_expired",
        "the write was accepted " + ms(waited) + " ago, more than storage.etcd.forward_within (" +
            ms(filter.forward_within()) +
            "), so it was not forwarded: meanwhile its key may have moved to another replica. "
            "A retry with the same token is accepted again",
        {{"key", key}});
    r.set(http::field::retry_after, "0");
    return r;
  }

  // 1 + the index of the first key whose floor (KeyLease::floor) is above
  // the token, or 0.
  size_t FencedKey(const KeyLease& held) const {
    if (held.floor() > token) return 1;
    for (size_t i = 0; i < held.more().size(); ++i) {
      if (held.more()[i].floor() > token) return i + 2;
    }
    return 0;
  }
};

// The handler of the key's turn (every key's, for a write of several), on
// the executor. A lambda, not a function it calls: std::function's invoker
// then holds the whole turn.
auto OnTurnOf(std::shared_ptr<PendingFence> pending) {
  return [p = std::move(pending)](KeyLease lease) {
    if (!lease.held()) {
      // Too many writes already wait for this key (enforce mode only: shadow
      // mode never refuses, docs/contract.md, "Configuration", so its writes
      // always queue). No Advance was made for this write.
      FenceVerdict v;
      v.outcome = "overloaded";
      Reply r = MakeError(http::status::service_unavailable, "too_many_waiting",
                          "too many writes are waiting for this key (limits."
                          "max_waiting_per_key = " +
                              std::to_string(p->filter.max_waiting_per_key()) + "); retry later",
                          {{"key", p->key}});
      r.set(http::field::retry_after, "1");
      v.reply = std::move(r);
      FenceFilter::Handler h = std::move(p->handler);
      return h(std::move(v));
    }
    {
      std::lock_guard lock(p->mu);
      if (p->delivered) return;  // refused already; `lease` hands the key on
      p->lease = std::move(lease);
      if (!p->answered) return;  // the store's answer delivers
      p->delivered = true;
    }
    p->Deliver();  // already on the executor
  };
}

}  // namespace

void FenceFilter::Check(const WriteIntent& intent, boost::asio::any_io_executor executor,
                        Handler handler, std::string_view whole_request) {
  if (!intent.targets.empty()) return CheckTree(intent, std::move(executor), std::move(handler));
  if (!intent.extra_keys.empty()) {
    return CheckSeveral(intent, std::move(executor), std::move(handler));
  }
  auto p = std::make_shared<PendingFence>(
      *this, intent,
      boost::asio::prefer(executor, boost::asio::execution::outstanding_work.tracked),
      std::move(handler));

  // The store's answer: on the store's thread, or on this thread inside
  // Acquire (an immediate error; under async durability, a decision made on
  // this thread). Delivery from here is always posted.
  auto on_answer = [raw = p.get()](const storage::Status& status, const storage::Fence& fence) {
    std::shared_ptr<PendingFence> p = std::move(raw->until_answered);
    p->filter.RecordAdvance(std::chrono::steady_clock::now() - p->advance_started);
    {
      std::lock_guard lock(p->mu);
      p->status = status;
      p->fence = fence;
      p->answered = true;
      if (!p->lease.held() && !p->RefusedLocked()) return;  // the turn comes later
      p->delivered = true;
    }
    boost::asio::post(p->executor, [p] { p->Deliver(); });
  };

  // The key's turn: on the executor.
  auto on_turn = OnTurnOf(p);

  // The wait for the key's turn and the check-and-advance overlap
  // (docs/contract.md, "The write path"): the Advance is enqueued as soon as
  // the write has its place in the key's queue, under the queue's lock, so
  // that the store (which decides in call order, token_store.h) decides the
  // writes of a key in the order they will be forwarded. While one write's
  // upstream exchange runs, the next one's check-and-advance (and its fsync,
  // shared with the writes queued behind it) is already done. Forwarding
  // still waits for the turn, so writes to a key reach the backend one at a
  // time, in order.
  //
  // The relay: on the thread that hands the key on, from another thread,
  // just before on_turn is posted. Only a write the store has accepted (or,
  // shadow, answered) is sent: one still unanswered (sync durability, its
  // fsync under way) or refused goes the usual way. Nothing else delivers
  // an accepted write before its turn, so `whole_request` is untouched
  // while it is sent, and `handed` needs no lock: the turn that reads it is
  // posted after the relay returns. Nothing after the send can throw (see
  // KeyQueue::Relay): a request that went must reach its session.
  // The relay holds a plain pointer, as on_answer does: it runs only before
  // the turn is posted, while on_turn (in the key's queue) keeps `p` alive.
  KeyQueue::Relay relay;
  if (!whole_request.empty()) {
    p->whole_request = whole_request;
    relay = [raw = p.get()](Courier& courier) {
      {
        std::lock_guard lock(raw->mu);
        if (!raw->answered || raw->delivered || raw->RefusedLocked()) return;
      }
      // Deliver refuses it at its turn.
      if (raw->Overdue() != FenceFilter::Clock::duration::zero()) return;
      if (!raw->filter.Forwardable(raw->fence.owner)) return;
      raw->handed = courier.Send(raw->whole_request);
    };
  }
  // Only with the Advance (a refused Acquire makes none). Not reset if the
  // Advance throws: the store may have kept its handler, and a fence that
  // is never freed is better than one freed too early.
  auto advance = [this, &intent, &on_answer, &p] {
    p->until_answered = p;
    p->advance_started = std::chrono::steady_clock::now();
    store_.Advance(intent.key, intent.token, on_answer);
  };
  // on_queued captures one reference: std::function keeps that in place,
  // without the allocation a three-pointer capture costs.
  queue_.Acquire(intent.key, p->executor, std::move(on_turn), /*bounded=*/!intent.shadow,
                 [&advance] { advance(); }, std::move(relay));
}

void FenceFilter::CheckSeveral(const WriteIntent& intent, boost::asio::any_io_executor executor,
                               Handler handler) {
  auto p = std::make_shared<PendingFence>(
      *this, intent,
      boost::asio::prefer(executor, boost::asio::execution::outstanding_work.tracked),
      std::move(handler));
  p->several = std::make_unique<PendingFence::SeveralKeys>();
  // Classify gives distinct keys. A repeat is dropped rather than trusted:
  // in the queue the write would wait behind itself, holding its key for
  // ever.
  std::vector<std::string>& extra_keys = p->several->extra_keys;
  for (const std::string& extra : intent.extra_keys) {
    if (extra != intent.key &&
        std::find(extra_keys.begin(), extra_keys.end(), extra) == extra_keys.end()) {
      extra_keys.push_back(extra);
    }
  }
  // As Check's on_answer, with the verdict on every key.
  auto on_answer = [raw = p.get()](const storage::Status& status, storage::BatchFence batch) {
    std::shared_ptr<PendingFence> p = std::move(raw->until_answered);
    p->filter.RecordAdvance(std::chrono::steady_clock::now() - p->advance_started);
    {
      std::lock_guard lock(p->mu);
      p->status = status;
      if (status.ok()) {
        PendingFence::SeveralKeys& several = *p->several;
        several.stale = batch.accepted ? 0 : batch.stale;
        p->fence.accepted = batch.accepted;
        p->fence.current = several.stale < batch.current.size() ? batch.current[several.stale] : 0;
        p->fence.owner = batch.owner;
        several.currents = std::move(batch.current);
      }
      p->answered = true;
      if (!p->lease.held() && !p->RefusedLocked()) return;  // the turns come later
      p->delivered = true;
    }
    boost::asio::post(p->executor, [p] { p->Deliver(); });
  };
  auto on_turn = OnTurnOf(p);
  // One decision for every key, made once the write has its place in the
  // queue of each (under the locks of all their shards): the store decides
  // it in the same order as every other write of those keys is forwarded.
  // No relay (handoff.h): a write of several keys is rare, and sent by its
  // own session once it has every turn.
  std::vector<storage::KeyToken> items;
  items.reserve(1 + extra_keys.size());
  items.push_back({intent.key, intent.token});
  for (const std::string& extra : extra_keys) items.push_back({extra, intent.token});
  auto advance = [this, &items, &on_answer, &p] {
    p->until_answered = p;
    p->advance_started = std::chrono::steady_clock::now();
    store_.AdvanceAll(std::move(items), on_answer);
  };
  queue_.AcquireAll(intent.key, extra_keys, p->executor, std::move(on_turn),
                    /*bounded=*/!intent.shadow, [&advance] { advance(); });
}

void FenceFilter::CheckTree(const WriteIntent& intent, boost::asio::any_io_executor executor,
                            Handler handler) {
  auto p = std::make_shared<PendingFence>(
      *this, intent,
      boost::asio::prefer(executor, boost::asio::execution::outstanding_work.tracked),
      std::move(handler));
  p->several = std::make_unique<PendingFence::SeveralKeys>();
  p->tree = std::make_unique<PendingFence::Tree>();
  p->tree->targets = intent.targets;
  // The keys, each once; `key` is the first (none for a write outside
  // every route).
  storage::TreeWrite write;
  write.token = intent.token;
  write.targets = intent.targets;
  if (!intent.key.empty()) write.keys.push_back(intent.key);
  for (const std::string& extra : intent.extra_keys) {
    if (std::find(write.keys.begin(), write.keys.end(), extra) == write.keys.end()) {
      write.keys.push_back(extra);
    }
  }
  for (size_t i = 1; i < write.keys.size(); ++i) p->several->extra_keys.push_back(write.keys[i]);

  // The queue: the keys first (KeyAt and the floors index them so), then
  // the nodes, each once with the strongest hold asked of it.
  std::vector<std::string> names(write.keys);
  std::vector<Hold> holds(names.size(), Hold::kExclusive);
  auto hold_node = [&](std::string_view path, Hold hold) {
    std::string name = TreeQueueName(path);
    auto it = std::find(names.begin() + static_cast<std::ptrdiff_t>(write.keys.size()),
                        names.end(), name);
    if (it == names.end()) {
      names.push_back(std::move(name));
      holds.push_back(hold);
      return;
    }
    Hold& had = holds[static_cast<size_t>(it - names.begin())];
    had = std::min(had, hold);  // kExclusive < kOwn < kShared
  };
  for (const storage::TreeTarget& t : intent.targets) {
    for (std::string_view a : storage::TreeAncestors(t.path)) hold_node(a, Hold::kShared);
    hold_node(t.path, t.subtree ? Hold::kExclusive : Hold::kOwn);
  }

  auto on_answer = [raw = p.get()](const storage::Status& status, storage::TreeVerdict verdict) {
    std::shared_ptr<PendingFence> p = std::move(raw->until_answered);
    p->filter.RecordAdvance(std::chrono::steady_clock::now() - p->advance_started);
    {
      std::lock_guard lock(p->mu);
      p->status = status;
      if (status.ok()) {
        using Kind = storage::TreeVerdict::Kind;
        PendingFence::SeveralKeys& several = *p->several;
        p->fence.accepted = verdict.kind == Kind::kAccepted;
        several.stale = verdict.kind == Kind::kStaleKey ? verdict.stale : 0;
        p->fence.current = verdict.kind == Kind::kStaleKey   ? verdict.current[verdict.stale]
                           : verdict.kind == Kind::kStaleTree ? verdict.tree_token
                           : verdict.current.empty()          ? 0
                                                              : verdict.current.front();
        several.currents = verdict.current;
        p->fence.owner = verdict.owner;
        p->tree->verdict = std::move(verdict);
      }
      p->answered = true;
      if (!p->lease.held() && !p->RefusedLocked()) return;  // the turns come later
      p->delivered = true;
    }
    boost::asio::post(p->executor, [p] { p->Deliver(); });
  };
  auto on_turn = OnTurnOf(p);
  auto advance = [this, &write, &on_answer, &p] {
    p->until_answered = p;
    p->advance_started = std::chrono::steady_clock::now();
    store_.AdvanceTree(std::move(write), on_answer);
  };
  queue_.AcquireAll(names.front(), std::span(names).subspan(1), holds, p->executor,
                    std::move(on_turn), /*bounded=*/!intent.shadow, [&advance] { advance(); });
}

std::string TreeQueueName(std::string_view path) { return storage::TreeKeyOf(path); }

size_t FenceFilter::max_waiting_per_key() const { return queue_.max_waiting_per_key(); }

}  // namespace fencegate::proxy
