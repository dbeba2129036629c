#include "fence/key_queue.h"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "tests/fence/shard_keys.h"

namespace fencegate::proxy {
namespace {

using boost::asio::io_context;

TEST(KeyQueue, SameKeyRunsOneAtATimeInArrivalOrder) {
  io_context ioc;
  KeyQueue q;
  std::vector<std::string> events;
  std::vector<KeyLease> held;
  for (int i = 0; i < 3; ++i) {
    q.Acquire("k", ioc.get_executor(), [&, i](KeyLease lease) {
      events.push_back("start " + std::to_string(i));
      held.push_back(std::move(lease));
    });
  }
  ioc.poll();
  ioc.restart();
  // Only the first got the key; two wait.
  ASSERT_EQ(events, (std::vector<std::string>{"start 0"}));
  EXPECT_EQ(q.waiting(), 2u);
  held[0].Release();
  ioc.poll();
  ioc.restart();
  ASSERT_EQ(events, (std::vector<std::string>{"start 0", "start 1"}));
  held[1].Release();
  ioc.poll();
  ioc.restart();
  ASSERT_EQ(events, (std::vector<std::string>{"start 0", "start 1", "start 2"}));
  held[2].Release();
  EXPECT_EQ(q.waiting(), 0u);
  EXPECT_EQ(q.active_keys(), 0u);
}

TEST(KeyQueue, OnQueuedRunsInsideAcquireInTurnOrderAndNotWhenRefused) {
  io_context ioc;
  KeyQueue q(1);  // one may wait behind the holder
  std::vector<std::string> events;
  std::vector<KeyLease> held;
  for (int i = 0; i < 3; ++i) {
    q.Acquire(
        "k", ioc.get_executor(),
        [&, i](KeyLease lease) {
          events.push_back((lease.held() ? "turn " : "refused ") + std::to_string(i));
          if (lease.held()) held.push_back(std::move(lease));
        },
        /*bounded=*/true, [&, i] { events.push_back("queued " + std::to_string(i)); });
  }
  // on_queued ran inside Acquire, before any handler; the third was refused.
  EXPECT_EQ(events, (std::vector<std::string>{"queued 0", "queued 1"}));
  ioc.poll();
  ioc.restart();
  EXPECT_EQ(events, (std::vector<std::string>{"queued 0", "queued 1", "turn 0", "refused 2"}));
  held[0].Release();
  ioc.poll();
  ioc.restart();
  EXPECT_EQ(events.back(), "turn 1");
  held[1].Release();
  EXPECT_EQ(q.active_keys(), 0u);
}

TEST(KeyQueue, AThrowingOnQueuedGivesThePlaceBack) {
  io_context ioc;
  KeyQueue q;
  std::vector<KeyLease> held;
  auto take = [&](KeyLease lease) { held.push_back(std::move(lease)); };
  q.Acquire("k", ioc.get_executor(), take);
  EXPECT_THROW(q.Acquire("k", ioc.get_executor(), take, true,
                         [] { throw std::runtime_error("no memory"); }),
               std::runtime_error);
  EXPECT_THROW(q.Acquire("other", ioc.get_executor(), take, true,
                         [] { throw std::runtime_error("no memory"); }),
               std::runtime_error);
  EXPECT_EQ(q.waiting(), 0u);
  EXPECT_EQ(q.active_keys(), 1u);  // only "k", held by the first
  ioc.poll();
  ASSERT_EQ(held.size(), 1u);
  held[0].Release();
  EXPECT_EQ(q.active_keys(), 0u);
}

TEST(KeyQueue, BeyondTheBoundTheHandlerGetsAnEmptyLeaseAtOnce) {
  io_context ioc;
  KeyQueue q(2);
  std::vector<KeyLease> held;
  std::vector<int> refused;
  for (int i = 0; i < 5; ++i) {
    q.Acquire("k", ioc.get_executor(), [&, i](KeyLease lease) {
      if (lease.held()) {
        held.push_back(std::move(lease));
      } else {
        refused.push_back(i);
      }
    });
  }
  ioc.poll();
  ioc.restart();
  EXPECT_EQ(held.size(), 1u);                     // 0 runs
  EXPECT_EQ(q.waiting(), 2u);                     // 1 and 2 wait
  EXPECT_EQ(refused, (std::vector<int>{3, 4}));   // the rest are refused
  q.Acquire("other", ioc.get_executor(), [&](KeyLease lease) { held.push_back(std::move(lease)); });
  ioc.poll();
  ioc.restart();
  EXPECT_EQ(held.size(), 2u);  // the bound is per key
  for (size_t i = 0; i < 4 && !held.empty(); ++i) {
    KeyLease l = std::move(held.front());
    held.erase(held.begin());
    l.Release();
    ioc.poll();
    ioc.restart();
  }
  EXPECT_EQ(q.waiting(), 0u);
  EXPECT_EQ(q.active_keys(), 0u);
}

TEST(KeyQueue, DifferentKeysDoNotWait) {
  io_context ioc;
  KeyQueue q;
  std::vector<KeyLease> held;
  q.Acquire("a", ioc.get_executor(), [&](KeyLease l) { held.push_back(std::move(l)); });
  q.Acquire("b", ioc.get_executor(), [&](KeyLease l) { held.push_back(std::move(l)); });
  ioc.poll();
  EXPECT_EQ(held.size(), 2u);
  EXPECT_EQ(q.active_keys(), 2u);
  EXPECT_EQ(q.waiting(), 0u);
}

// The fence filter runs the store's Advance in on_queued, under the lock of
// the key's shard; a write to a key of another shard, from another thread,
// must not wait for it. With one lock for all keys the second Acquire
// blocks until the first on_queued returns, which here never comes: the
// wait below gives up and the test fails.
TEST(KeyQueue, OnQueuedDoesNotBlockAcquireOfAKeyInAnotherShard) {
  io_context ioc;
  KeyQueue q;
  const std::string a = "a";
  std::string b = "b";
  for (int i = 0; KeyQueue::ShardOf(b) == KeyQueue::ShardOf(a); ++i) b = "b" + std::to_string(i);
  std::vector<KeyLease> held;
  std::promise<void> queued;
  std::thread other;
  bool other_queued = false;
  q.Acquire(
      a, ioc.get_executor(), [&](KeyLease l) { held.push_back(std::move(l)); }, true,
      [&] {
        other = std::thread([&] {
          q.Acquire(
              b, ioc.get_executor(), [&](KeyLease l) { held.push_back(std::move(l)); }, true,
              [&] { queued.set_value(); });
        });
        other_queued =
            queued.get_future().wait_for(std::chrono::seconds(10)) == std::future_status::ready;
      });
  other.join();  // after a's on_queued has returned, whatever happened
  EXPECT_TRUE(other_queued) << "Acquire of " << b << " waited for on_queued of " << a;
  ioc.poll();
  EXPECT_EQ(held.size(), 2u);
  EXPECT_EQ(q.active_keys(), 2u);
}

// A released key's entry is kept and serves the next new key of its shard
// (KeyQueue::Shard::spare). Each key must still be found under its own name:
// with an entry reused under its old name, the second write of `c` below
// would not wait, and `a` would find itself busy.
TEST(KeyQueue, ARecycledEntryTakesTheNewKeysName) {
  io_context ioc;
  KeyQueue q;
  // Longer than a std::string keeps inline, all in one shard.
  const std::vector<std::string> keys = testing::KeysOfOneShard("/objects/tenant/key-", 4);
  std::vector<KeyLease> held;
  auto hold = [&](KeyLease l) { held.push_back(std::move(l)); };
  // Three keys at once, then all released: two entries are kept (the
  // bound), one is freed.
  for (int i = 0; i < 3; ++i) q.Acquire(keys[i], ioc.get_executor(), hold);
  ioc.poll();
  ioc.restart();
  ASSERT_EQ(held.size(), 3u);
  held.clear();
  EXPECT_EQ(q.active_keys(), 0u);
  // A fourth key, then itself again: the second waits behind the first.
  q.Acquire(keys[3], ioc.get_executor(), hold);
  bool second_ran = false;
  q.Acquire(keys[3], ioc.get_executor(), [&](KeyLease l) {
    second_ran = true;
    held.push_back(std::move(l));
  });
  // A released key is free again: no wait.
  q.Acquire(keys[0], ioc.get_executor(), hold);
  ioc.poll();
  ioc.restart();
  EXPECT_FALSE(second_ran);
  EXPECT_EQ(q.waiting(), 1u);
  EXPECT_EQ(q.active_keys(), 2u);
  ASSERT_EQ(held.size(), 2u);
  held.front().Release();  // the fourth key's first write: its second's turn
  ioc.poll();
  EXPECT_TRUE(second_ran);
  held.clear();
  EXPECT_EQ(q.active_keys(), 0u);
  EXPECT_EQ(q.waiting(), 0u);
}

TEST(KeyQueue, ManyKeysOfOneShardEachHandOnToTheirOwnWaiter) {
  // More keys in one shard than libstdc++ scans without hashing (20), so the
  // shard's map rehashes while leases point at its keys; every lease must
  // find its own key again when released (the hash it kept) and hand it to
  // that key's waiter, and to no other.
  io_context ioc;
  KeyQueue q;
  constexpr int kKeys = 100;
  const std::vector<std::string> keys = testing::KeysOfOneShard("/objects/tenant/key-", kKeys);
  std::vector<KeyLease> first(kKeys);
  std::vector<int> turns;  // the keys whose second write got its turn, in order
  for (int i = 0; i < kKeys; ++i) {
    q.Acquire(keys[i], ioc.get_executor(), [&first, i](KeyLease l) { first[i] = std::move(l); });
    q.Acquire(keys[i], ioc.get_executor(), [&turns, i](const KeyLease& l) {
      EXPECT_TRUE(l.held());
      EXPECT_TRUE(l.waited());
      turns.push_back(i);
    });
  }
  ioc.poll();
  ioc.restart();
  ASSERT_EQ(q.active_keys(), static_cast<size_t>(kKeys));
  ASSERT_EQ(q.waiting(), static_cast<size_t>(kKeys));
  EXPECT_TRUE(turns.empty());
  // Released in another order than acquired: each frees exactly its key.
  std::vector<int> want;
  for (int i = kKeys - 1; i >= 0; i -= 2) want.push_back(i);
  for (int i = 0; i < kKeys; i += 2) want.push_back(i);
  for (size_t n = 0; n < want.size(); ++n) {
    first[want[n]].Release();
    ioc.poll();
    ioc.restart();
    ASSERT_EQ(turns.size(), n + 1);
    EXPECT_EQ(turns.back(), want[n]);
    EXPECT_EQ(q.waiting(), static_cast<size_t>(kKeys) - n - 1);
  }
  EXPECT_EQ(q.active_keys(), 0u);  // every waiter dropped its lease
}

TEST(KeyQueue, KeysSpreadOverTheShards) {
  std::set<size_t> shards;
  for (int i = 0; i < 1000; ++i) shards.insert(KeyQueue::ShardOf("/objects/k" + std::to_string(i)));
  EXPECT_EQ(shards.size(), KeyQueue::kShards);
}

TEST(KeyQueue, DroppedLeaseHandsOverTheKey) {
  io_context ioc;
  KeyQueue q;
  bool second = false;
  q.Acquire("k", ioc.get_executor(), [](KeyLease) { /* dropped at once */ });
  q.Acquire("k", ioc.get_executor(), [&](KeyLease) { second = true; });
  ioc.poll();
  EXPECT_TRUE(second);
  EXPECT_EQ(q.active_keys(), 0u);
}

TEST(KeyQueue, HandlerIsPostedWhenTheCallerIsNotOnTheExecutor) {
  io_context ioc;
  KeyQueue q;
  bool ran = false;
  q.Acquire("k", ioc.get_executor(), [&](KeyLease) { ran = true; });
  EXPECT_FALSE(ran);
  ioc.poll();
  EXPECT_TRUE(ran);
}

// An I/O thread acquiring a free key for its own session gets it before
// Acquire returns; a key that is taken still waits for its turn, posted.
TEST(KeyQueue, FreeKeyOnTheExecutorsOwnThreadRunsBeforeAcquireReturns) {
  io_context ioc;
  KeyQueue q;
  std::vector<std::string> events;
  std::vector<KeyLease> held;
  boost::asio::post(ioc, [&] {
    q.Acquire("k", ioc.get_executor(), [&](KeyLease l) {
      events.emplace_back("first");
      held.push_back(std::move(l));
    });
    events.emplace_back("first returned");
    q.Acquire("k", ioc.get_executor(), [&](KeyLease l) {
      events.emplace_back("second");
      held.push_back(std::move(l));
    });
    events.emplace_back("second returned");
    ASSERT_EQ(held.size(), 1u) << "the free key was not granted inside Acquire";
    held.front().Release();  // the second's turn: posted, not run here
    events.emplace_back("released");
  });
  ioc.poll();
  EXPECT_EQ(events, (std::vector<std::string>{"first", "first returned", "second returned",
                                              "released", "second"}));
}

TEST(KeyQueue, HandOnRunsTheNextWaiterOfThisThreadBeforeItReturns) {
  io_context ioc;
  KeyQueue q;
  std::vector<std::string> events;
  std::vector<KeyLease> held;
  boost::asio::post(ioc, [&] {
    q.Acquire("k", ioc.get_executor(), [&](KeyLease l) { held.push_back(std::move(l)); });
    q.Acquire("k", ioc.get_executor(), [&](KeyLease l) {
      events.emplace_back("second");
      held.push_back(std::move(l));
    });
    q.Acquire("k", ioc.get_executor(), [&](KeyLease l) {
      events.emplace_back("third");
      held.push_back(std::move(l));
    });
    ASSERT_EQ(held.size(), 1u);
    held.front().HandOn();  // the second's turn, run here
    events.emplace_back("handed on");
    ASSERT_EQ(held.size(), 2u);
    held.back().Release();  // the third's turn: posted, as ever
    events.emplace_back("released");
  });
  ioc.poll();
  EXPECT_EQ(events,
            (std::vector<std::string>{"second", "handed on", "released", "third"}));
}

TEST(KeyQueue, HandOnPostsToAWaiterOfAnotherThread) {
  io_context mine;
  io_context theirs;
  KeyQueue q;
  std::vector<std::string> events;
  KeyLease first;
  KeyLease second;
  q.Acquire("k", mine.get_executor(), [&](KeyLease l) { first = std::move(l); });
  q.Acquire("k", theirs.get_executor(), [&](KeyLease l) {
    events.emplace_back("second");
    second = std::move(l);
  });
  mine.poll();
  mine.restart();
  ASSERT_TRUE(first.held());
  boost::asio::post(mine, [&] {
    first.HandOn();  // `theirs` is not running here: its handler must not run on this thread
    events.emplace_back("handed on");
  });
  mine.poll();
  EXPECT_EQ(events, (std::vector<std::string>{"handed on"}));
  theirs.poll();
  EXPECT_EQ(events, (std::vector<std::string>{"handed on", "second"}));
  EXPECT_TRUE(second.held());
}

// A courier that sends nothing: it records that it was asked.
class RecordingCourier : public Courier {
 public:
  std::optional<HandedConnection> Send(std::string_view request) override {
    requests.emplace_back(request);
    return std::nullopt;
  }
  std::vector<std::string> requests;
};

TEST(KeyQueue, HandOnWithACourierRunsTheRelayOfAWaiterOfAnotherThreadHereFirst) {
  io_context mine;
  io_context theirs;
  KeyQueue q;
  RecordingCourier courier;
  std::vector<std::string> events;
  KeyLease first;
  KeyLease second;
  q.Acquire("k", mine.get_executor(), [&](KeyLease l) { first = std::move(l); });
  q.Acquire(
      "k", theirs.get_executor(),
      [&](KeyLease l) {
        events.emplace_back("second");
        second = std::move(l);
      },
      true, {},
      [&](Courier& c) {
        // On the thread that hands the key on, before the turn is posted.
        events.emplace_back(mine.get_executor().running_in_this_thread() ? "relay on mine"
                                                                         : "relay elsewhere");
        (void)c.Send("request");
      });
  mine.poll();
  mine.restart();
  ASSERT_TRUE(first.held());
  EXPECT_TRUE(events.empty());  // waiting does not relay
  boost::asio::post(mine, [&] {
    first.HandOn(&courier);
    events.emplace_back("handed on");
  });
  mine.poll();
  EXPECT_EQ(events, (std::vector<std::string>{"relay on mine", "handed on"}));
  EXPECT_EQ(courier.requests, (std::vector<std::string>{"request"}));
  theirs.poll();
  EXPECT_EQ(events, (std::vector<std::string>{"relay on mine", "handed on", "second"}));
  EXPECT_TRUE(second.held());
}

// The relay is for a hand-over from another thread with a courier only:
// not for a waiter of the same thread (its turn runs at once), not without
// a courier, not for Release.
TEST(KeyQueue, TheRelayRunsOnlyForHandOnWithACourierFromAnotherThread) {
  io_context mine;
  io_context theirs;
  KeyQueue q;
  RecordingCourier courier;
  int relays = 0;
  std::vector<KeyLease> held;
  auto take = [&](KeyLease l) { held.push_back(std::move(l)); };
  auto relay = [&](Courier&) { ++relays; };
  q.Acquire("k", mine.get_executor(), take, true, {}, relay);  // free: no relay ever
  q.Acquire("k", mine.get_executor(), take, true, {}, relay);     // same thread as the holder
  q.Acquire("k", theirs.get_executor(), take, true, {}, relay);   // handed on without courier
  q.Acquire("k", theirs.get_executor(), take, true, {}, relay);   // released
  mine.poll();
  mine.restart();
  ASSERT_EQ(held.size(), 1u);
  boost::asio::post(mine, [&] { held[0].HandOn(&courier); });  // runs the second here
  mine.poll();
  mine.restart();
  ASSERT_EQ(held.size(), 2u);
  boost::asio::post(mine, [&] { held[1].HandOn(); });
  mine.poll();
  theirs.poll();
  theirs.restart();
  ASSERT_EQ(held.size(), 3u);
  boost::asio::post(mine, [&] { held[2].Release(); });
  mine.restart();
  mine.poll();
  theirs.poll();
  ASSERT_EQ(held.size(), 4u);
  EXPECT_EQ(relays, 0);
  EXPECT_TRUE(courier.requests.empty());
}

// A lease says whether its write waited behind another one of its key:
// sessions move towards the keys they keep waiting for (SessionAffinity).
TEST(KeyQueue, ALeaseSaysWhetherItsWriteWaited) {
  io_context ioc;
  KeyQueue q;
  KeyLease first;
  KeyLease second;
  q.Acquire("k", ioc.get_executor(), [&](KeyLease l) { first = std::move(l); });
  q.Acquire("k", ioc.get_executor(), [&](KeyLease l) { second = std::move(l); });
  ioc.poll();
  ioc.restart();
  ASSERT_TRUE(first.held());
  EXPECT_FALSE(first.waited());  // the key was free
  first.Release();
  ioc.poll();
  ASSERT_TRUE(second.held());
  EXPECT_TRUE(second.waited());
  KeyLease moved = std::move(second);
  EXPECT_TRUE(moved.waited());  // a move keeps it
}

TEST(KeyQueue, MovedLeaseReleasesOnce) {
  io_context ioc;
  KeyQueue q;
  KeyLease outer, second;
  int seconds = 0;
  q.Acquire("k", ioc.get_executor(), [&](KeyLease l) { outer = std::move(l); });
  q.Acquire("k", ioc.get_executor(), [&](KeyLease l) { ++seconds; second = std::move(l); });
  q.Acquire("k", ioc.get_executor(), [&](KeyLease) { ++seconds; });
  ioc.poll();
  ioc.restart();
  EXPECT_TRUE(outer.held());
  KeyLease moved = std::move(outer);
  EXPECT_FALSE(outer.held());
  moved.Release();
  moved.Release();  // second release is a no-op: it must not admit the third
  ioc.poll();
  ioc.restart();
  EXPECT_EQ(seconds, 1);
  second.Release();
  ioc.poll();
  EXPECT_EQ(seconds, 2);
}

// Keys in two different shards, and a third in the first one's shard (so a
// caller's keys may share a shard lock, which it takes once).
struct ThreeKeys {
  std::string a = "a";
  std::string b = "b";
  std::string c;
  ThreeKeys() {
    for (int i = 0; KeyQueue::ShardOf(b) == KeyQueue::ShardOf(a); ++i) b = "b" + std::to_string(i);
    for (int i = 0; c.empty() || KeyQueue::ShardOf(c) != KeyQueue::ShardOf(a); ++i) {
      c = "c" + std::to_string(i);
    }
  }
};

TEST(KeyQueueAll, AWriteOfSeveralKeysRunsOnceItHasTheTurnOnEveryKey) {
  io_context ioc;
  KeyQueue q;
  const ThreeKeys k;
  KeyLease on_a, on_b, all, after;
  q.Acquire(k.a, ioc.get_executor(), [&](KeyLease l) { on_a = std::move(l); });
  q.Acquire(k.b, ioc.get_executor(), [&](KeyLease l) { on_b = std::move(l); });
  int queued = 0;
  const std::vector<std::string> more = {k.b, k.c};
  q.AcquireAll(
      k.a, more, ioc.get_executor(), [&](KeyLease l) { all = std::move(l); }, true,
      [&] { ++queued; });
  EXPECT_EQ(queued, 1);  // once, for every key
  // c was free: the write holds it already, and a write of c waits.
  q.Acquire(k.c, ioc.get_executor(), [&](KeyLease l) { after = std::move(l); });
  ioc.poll();
  ioc.restart();
  ASSERT_TRUE(on_a.held() && on_b.held());
  EXPECT_FALSE(all.held());
  EXPECT_EQ(q.waiting(), 2u);  // the write of three keys (on a and b, once), the write of c
  on_a.Release();
  ioc.poll();
  ioc.restart();
  EXPECT_FALSE(all.held()) << "ran with the turn on a only";
  EXPECT_EQ(q.waiting(), 2u) << "a write of several keys waits until it has every turn";
  on_b.Release();
  ioc.poll();
  ioc.restart();
  ASSERT_TRUE(all.held());
  EXPECT_TRUE(all.waited());
  ASSERT_EQ(all.more().size(), 2u);
  EXPECT_TRUE(all.more()[0].held());
  EXPECT_TRUE(all.more()[1].held());
  EXPECT_FALSE(after.held());
  all.Release();  // every key goes on
  ioc.poll();
  EXPECT_TRUE(after.held());
  after.Release();
  EXPECT_EQ(q.active_keys(), 0u);
  EXPECT_EQ(q.waiting(), 0u);
}

TEST(KeyQueueAll, FreeKeysOnTheExecutorsOwnThreadRunBeforeAcquireAllReturns) {
  io_context ioc;
  KeyQueue q;
  const ThreeKeys k;
  std::vector<std::string> events;
  KeyLease all;
  boost::asio::post(ioc, [&] {
    const std::vector<std::string> more = {k.b};
    q.AcquireAll(k.a, more, ioc.get_executor(), [&](KeyLease l) {
      events.emplace_back("turn");
      all = std::move(l);
    });
    events.emplace_back("returned");
  });
  ioc.poll();
  EXPECT_EQ(events, (std::vector<std::string>{"turn", "returned"}));
  EXPECT_FALSE(all.waited());
  ASSERT_EQ(all.more().size(), 1u);
  all.Release();
  EXPECT_EQ(q.active_keys(), 0u);
}

// Each key's writes keep their order: writes of one key and of several,
// interleaved, take their turns on every key in the order they asked.
TEST(KeyQueueAll, EachKeyKeepsItsOrder) {
  io_context ioc;
  KeyQueue q;
  const ThreeKeys k;
  std::vector<std::string> turns;
  std::map<std::string, KeyLease> held;
  auto take = [&](std::string name) {
    return [&, name](KeyLease l) {
      turns.push_back(name);
      held[name] = std::move(l);
    };
  };
  const std::vector<std::string> b = {k.b};
  const std::vector<std::string> a = {k.a};
  q.Acquire(k.a, ioc.get_executor(), take("first a"));
  q.AcquireAll(k.a, b, ioc.get_executor(), take("ab"));  // holds b, waits for a
  q.Acquire(k.b, ioc.get_executor(), take("b"));         // behind ab on b
  q.AcquireAll(k.b, a, ioc.get_executor(), take("ba"));  // behind ab on a and on b
  q.Acquire(k.a, ioc.get_executor(), take("last a"));    // behind ba on a
  auto release = [&](const std::string& name) {
    held.at(name).Release();
    ioc.poll();
    ioc.restart();
  };
  ioc.poll();
  ioc.restart();
  EXPECT_EQ(turns, (std::vector<std::string>{"first a"}));
  release("first a");
  EXPECT_EQ(turns, (std::vector<std::string>{"first a", "ab"}));
  release("ab");  // b to "b", a to "ba" (which still waits for b)
  EXPECT_EQ(turns, (std::vector<std::string>{"first a", "ab", "b"}));
  release("b");
  EXPECT_EQ(turns, (std::vector<std::string>{"first a", "ab", "b", "ba"}));
  release("ba");
  EXPECT_EQ(turns, (std::vector<std::string>{"first a", "ab", "b", "ba", "last a"}));
  release("last a");
  EXPECT_EQ(q.active_keys(), 0u);
  EXPECT_EQ(q.waiting(), 0u);
}

TEST(KeyQueueAll, AFullQueueOnAnyKeyRefusesTheWholeWriteAndPlacesItNowhere) {
  io_context ioc;
  KeyQueue q(1);
  const ThreeKeys k;
  std::vector<KeyLease> held;
  q.Acquire(k.b, ioc.get_executor(), [&](KeyLease l) { held.push_back(std::move(l)); });
  q.Acquire(k.b, ioc.get_executor(), [&](KeyLease l) { held.push_back(std::move(l)); });
  ASSERT_EQ(q.waiting(), 1u);  // b's queue is full
  bool refused = false;
  bool queued = false;
  const std::vector<std::string> more = {k.b};
  q.AcquireAll(
      k.a, more, ioc.get_executor(), [&](const KeyLease& l) { refused = !l.held(); }, true,
      [&] { queued = true; });
  EXPECT_FALSE(queued) << "the store would have been asked";
  EXPECT_EQ(q.active_keys(), 1u) << "a was taken";
  EXPECT_EQ(q.waiting(), 1u);
  ioc.poll();
  ioc.restart();
  EXPECT_TRUE(refused);
  // Unbounded (shadow) writes always queue.
  KeyLease all;
  q.AcquireAll(
      k.a, more, ioc.get_executor(), [&](KeyLease l) { all = std::move(l); }, false);
  EXPECT_EQ(q.waiting(), 2u);
  ASSERT_EQ(held.size(), 1u);
  held.clear();  // b to its second write
  ioc.poll();
  ioc.restart();
  held.clear();  // b to the write of a and b
  ioc.poll();
  EXPECT_TRUE(all.held());
  all.Release();
  EXPECT_EQ(q.active_keys(), 0u);
}

TEST(KeyQueueAll, AThrowingOnQueuedGivesEveryPlaceBack) {
  io_context ioc;
  KeyQueue q;
  const ThreeKeys k;
  KeyLease on_b;
  q.Acquire(k.b, ioc.get_executor(), [&](KeyLease l) { on_b = std::move(l); });
  const std::vector<std::string> more = {k.b, k.c};
  EXPECT_THROW(q.AcquireAll(
                   k.a, more, ioc.get_executor(), [](KeyLease) { ADD_FAILURE() << "ran"; }, true,
                   [] { throw std::runtime_error("no memory"); }),
               std::runtime_error);
  EXPECT_EQ(q.waiting(), 0u);
  EXPECT_EQ(q.active_keys(), 1u);  // only b, held by its first write
  ioc.poll();
  on_b.Release();
  ioc.poll();
  EXPECT_EQ(q.active_keys(), 0u);
}

// The same with many keys of one shard: the caller's new keys grow (and
// rehash) the shard's map after it took its place behind the held key, and
// that place must still be given back.
TEST(KeyQueueAll, AThrowingOnQueuedGivesEveryPlaceBackAcrossARehash) {
  io_context ioc;
  KeyQueue q;
  const std::vector<std::string> keys = testing::KeysOfOneShard("/objects/tenant/key-", 64);
  KeyLease first;
  q.Acquire(keys[0], ioc.get_executor(), [&](KeyLease l) { first = std::move(l); });
  const std::span<const std::string> more(keys.data() + 1, keys.size() - 1);
  EXPECT_THROW(q.AcquireAll(
                   keys[0], more, ioc.get_executor(), [](KeyLease) { ADD_FAILURE() << "ran"; },
                   true, [] { throw std::runtime_error("no memory"); }),
               std::runtime_error);
  EXPECT_EQ(q.waiting(), 0u);
  EXPECT_EQ(q.active_keys(), 1u);
  ioc.poll();
  ioc.restart();
  ASSERT_TRUE(first.held());
  bool second = false;
  q.Acquire(keys[0], ioc.get_executor(), [&](const KeyLease&) { second = true; });
  first.Release();  // to the write above, not to the one that threw
  ioc.poll();
  EXPECT_TRUE(second);
  EXPECT_EQ(q.active_keys(), 0u);
}

// Writers of {a, b}, {b, a} and of a and b alone, from several threads at
// once, round after round: every write gets its turn (a cycle of waits
// would leave some waiting forever, and the deadline below fails the test),
// and no two writes ever hold one key together.
TEST(KeyQueueAll, WritesOfSeveralKeysInAnyOrderNeverDeadlock) {
  constexpr int kThreads = 4;
  constexpr int kRounds = 2000;
  KeyQueue q;
  const ThreeKeys k;
  std::vector<std::unique_ptr<io_context>> iocs;
  for (int i = 0; i < kThreads; ++i) iocs.push_back(std::make_unique<io_context>());
  std::map<std::string, std::atomic<int>> holders;
  for (const std::string& key : {k.a, k.b, k.c}) holders[key] = 0;
  std::atomic<int> done{0};
  std::atomic<bool> overlap{false};
  std::promise<void> all_done;
  const int total = kThreads * kRounds;
  auto finish = [&] {
    if (done.fetch_add(1) + 1 == total) all_done.set_value();
  };
  // Holds every key of the lease for a moment, then lets go.
  std::atomic<size_t> most_waiting{0};
  auto hold = [&](KeyLease lease, std::vector<std::string> keys) {
    size_t waiting = q.waiting();
    size_t most = most_waiting.load();
    while (waiting > most && !most_waiting.compare_exchange_weak(most, waiting)) {
    }
    for (const std::string& key : keys) {
      if (holders.at(key).fetch_add(1) != 0) overlap = true;
    }
    for (const std::string& key : keys) holders.at(key).fetch_sub(1);
    lease.Release();
    finish();
  };
  const std::vector<std::vector<std::string>> shapes = {
      {k.a, k.b}, {k.b, k.a}, {k.a}, {k.b}, {k.c, k.a, k.b}, {k.b, k.c}};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      io_context& ioc = *iocs[t];
      auto work = boost::asio::make_work_guard(ioc);
      for (int r = 0; r < kRounds; ++r) {
        const std::vector<std::string>& keys = shapes[(t + r) % shapes.size()];
        auto handler = [&, keys](KeyLease l) { hold(std::move(l), keys); };
        std::span<const std::string> more(keys.data() + 1, keys.size() - 1);
        // Asked from this thread, turns run on another thread's context.
        q.AcquireAll(keys[0], more, iocs[(t + r) % kThreads]->get_executor(), handler);
        ioc.poll();
      }
      work.reset();
    });
  }
  std::vector<std::thread> runners;
  std::atomic<bool> stop{false};
  for (int t = 0; t < kThreads; ++t) {
    runners.emplace_back([&, t] {
      while (!stop) {
        iocs[t]->run_for(std::chrono::milliseconds(5));
        iocs[t]->restart();
      }
    });
  }
  const bool finished =
      all_done.get_future().wait_for(std::chrono::seconds(60)) == std::future_status::ready;
  for (auto& th : threads) th.join();
  stop = true;
  for (auto& th : runners) th.join();
  EXPECT_TRUE(finished) << done << " of " << total << " writes got their turn, " << q.waiting()
                        << " still wait";
  EXPECT_FALSE(overlap) << "two writes held one key at once";
  EXPECT_GT(most_waiting.load(), 0u) << "no write ever waited: the test proved nothing";
  if (finished) {
    EXPECT_EQ(q.waiting(), 0u);
    EXPECT_EQ(q.active_keys(), 0u);
  }
  for (auto& ioc : iocs) {
    ioc->restart();
    ioc->poll();  // handlers left over after a deadline failure: release what they hold
  }
}

// The admin fence on a busy key: the waiter behind the holder learns the
// floor at its turn; the holder's own lease has none (it held the turn when
// the fence was decided). The fence runs on_queued under the shard's lock,
// at once, without waiting for the turn.
TEST(KeyQueueFence, TheNextWaiterLearnsTheFloorAtItsTurn) {
  io_context ioc;
  KeyQueue q;
  KeyLease first, second;
  q.Acquire("k", ioc.get_executor(), [&](KeyLease l) { first = std::move(l); });
  q.Acquire("k", ioc.get_executor(), [&](KeyLease l) { second = std::move(l); });
  ioc.poll();
  ioc.restart();
  int raised = 0;
  q.Fence("k", 10, [&] { ++raised; });
  EXPECT_EQ(raised, 1);
  q.Fence("k", 7, [&] { ++raised; });  // a lower fence never lowers the floor
  EXPECT_EQ(raised, 2);
  EXPECT_EQ(first.floor(), 0u);
  first.Release();
  ioc.poll();
  ioc.restart();
  ASSERT_TRUE(second.held());
  EXPECT_EQ(second.floor(), 10u);
  second.Release();
  EXPECT_EQ(q.active_keys(), 0u);
  // The floor went with the key's entry; a fence on a free key leaves none
  // (the store refuses what comes later).
  q.Fence("k", 20, [&] { ++raised; });
  EXPECT_EQ(raised, 3);
  EXPECT_EQ(q.active_keys(), 0u);
  KeyLease later;
  q.Acquire("k", ioc.get_executor(), [&](KeyLease l) { later = std::move(l); });
  ioc.poll();
  ASSERT_TRUE(later.held());
  EXPECT_EQ(later.floor(), 0u);
}

// A released entry serves the next new key of its shard: that key must not
// inherit the old key's floor.
TEST(KeyQueueFence, ARecycledEntryStartsWithoutAFloor) {
  io_context ioc;
  KeyQueue q;
  const std::vector<std::string> keys = testing::KeysOfOneShard("/objects/tenant/key-", 2);
  std::vector<KeyLease> held;
  auto take = [&](KeyLease l) { held.push_back(std::move(l)); };
  q.Acquire(keys[0], ioc.get_executor(), take);
  q.Fence(keys[0], 50, {});
  ioc.poll();
  ioc.restart();
  held.clear();  // keys[0]'s entry becomes a spare, floor and all
  q.Acquire(keys[1], ioc.get_executor(), take);
  q.Acquire(keys[1], ioc.get_executor(), take);
  ioc.poll();
  ioc.restart();
  ASSERT_EQ(held.size(), 1u);
  held.front().Release();
  ioc.poll();
  ASSERT_EQ(held.size(), 2u);
  EXPECT_EQ(held.back().floor(), 0u);
}

// A write of several keys that holds one key and waits for another when a
// fence on the held key is decided learns that floor too, when its turn on
// the last key comes: it has not gone to the backend yet.
TEST(KeyQueueFence, AWriteOfSeveralKeysLearnsTheFloorsAsOfItsLastTurn) {
  io_context ioc;
  KeyQueue q;
  const ThreeKeys k;
  KeyLease on_b, all;
  q.Acquire(k.b, ioc.get_executor(), [&](KeyLease l) { on_b = std::move(l); });
  const std::vector<std::string> more = {k.b};
  q.AcquireAll(k.a, more, ioc.get_executor(), [&](KeyLease l) { all = std::move(l); });
  ioc.poll();
  ioc.restart();
  q.Fence(k.a, 10, {});  // a is held by the waiting write
  q.Fence(k.b, 12, {});  // b is held by the first write
  on_b.Release();
  ioc.poll();
  ASSERT_TRUE(all.held());
  EXPECT_EQ(all.floor(), 10u);
  ASSERT_EQ(all.more().size(), 1u);
  EXPECT_EQ(all.more()[0].floor(), 12u);
}

// A write that may be refused at its turn must not be sent before it: with
// a floor on the key, a hand-over from another thread skips the relay and
// gives the turn the usual way.
TEST(KeyQueueFence, WithAFloorTheRelayIsSkipped) {
  io_context mine;
  io_context theirs;
  KeyQueue q;
  RecordingCourier courier;
  int relays = 0;
  KeyLease first, second;
  q.Acquire("k", mine.get_executor(), [&](KeyLease l) { first = std::move(l); });
  q.Acquire(
      "k", theirs.get_executor(), [&](KeyLease l) { second = std::move(l); }, true, {},
      [&](Courier& c) {
        ++relays;
        (void)c.Send("request");
      });
  mine.poll();
  mine.restart();
  ASSERT_TRUE(first.held());
  q.Fence("k", 3, {});
  boost::asio::post(mine, [&] { first.HandOn(&courier); });
  mine.poll();
  theirs.poll();
  EXPECT_EQ(relays, 0);
  EXPECT_TRUE(courier.requests.empty());
  ASSERT_TRUE(second.held());
  EXPECT_EQ(second.floor(), 3u);
}

// A lease of several keys handed on hands on every key, each to its next
// waiter, on this thread.
TEST(KeyQueueAll, HandOnOfSeveralKeysHandsOnEveryKey) {
  io_context ioc;
  KeyQueue q;
  const ThreeKeys k;
  std::vector<std::string> events;
  KeyLease all, next_a, next_b;
  boost::asio::post(ioc, [&] {
    const std::vector<std::string> more = {k.b};
    q.AcquireAll(k.a, more, ioc.get_executor(), [&](KeyLease l) { all = std::move(l); });
    q.Acquire(k.a, ioc.get_executor(), [&](KeyLease l) {
      events.emplace_back("a");
      next_a = std::move(l);
    });
    q.Acquire(k.b, ioc.get_executor(), [&](KeyLease l) {
      events.emplace_back("b");
      next_b = std::move(l);
    });
    ASSERT_TRUE(all.held());
    all.HandOn();
    events.emplace_back("handed on");
  });
  ioc.poll();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events.back(), "handed on");
  EXPECT_TRUE(next_a.held() && next_b.held());
}

// Holds (the tree of paths): shared holders go side by side, an exclusive
// one alone, kOwn beside shared ones but not beside another kOwn; each
// entry grants strictly in queue order, so a shared request behind a waiting
// exclusive one waits too.
class KeyQueueHolds : public ::testing::Test {
 protected:
  // A write of `key` (exclusive) that holds the one node with `hold`; its
  // lease lands in *out once granted (!held() when refused).
  void Acquire(const std::string& key, Hold hold, KeyLease* out) {
    const Hold holds[] = {Hold::kExclusive, hold};
    const std::string more[] = {"node"};
    q.AcquireAll(key, more, holds, ioc.get_executor(),
                 [out](KeyLease l) { *out = std::move(l); });
    Run();
  }
  void Run() {
    ioc.poll();
    ioc.restart();
  }
  io_context ioc;
  KeyQueue q{/*max_waiting_per_key=*/1};
};

TEST_F(KeyQueueHolds, SharedSideBySideExclusiveAloneInQueueOrder) {
  KeyLease s1, s2, x, s3;
  Acquire("k1", Hold::kShared, &s1);
  Acquire("k2", Hold::kShared, &s2);
  EXPECT_TRUE(s1.held() && s2.held()) << "two shared holders at once";
  Acquire("k3", Hold::kExclusive, &x);
  EXPECT_FALSE(x.held());
  Acquire("k4", Hold::kShared, &s3);
  EXPECT_FALSE(s3.held()) << "a shared request passed an exclusive one waiting before it";
  EXPECT_EQ(q.waiting(), 2u);
  s1.Release();
  Run();
  EXPECT_FALSE(x.held()) << "exclusive beside a shared holder";
  s2.Release();
  Run();
  EXPECT_TRUE(x.held());
  EXPECT_FALSE(s3.held());
  x.Release();
  Run();
  EXPECT_TRUE(s3.held());
  s3.Release();
  EXPECT_EQ(q.active_keys(), 0u);
  EXPECT_EQ(q.waiting(), 0u);
}

TEST_F(KeyQueueHolds, OwnGoesBesideSharedButNotBesideOwn) {
  KeyLease shared, own, own2, shared2;
  Acquire("k1", Hold::kShared, &shared);
  Acquire("k2", Hold::kOwn, &own);
  EXPECT_TRUE(shared.held() && own.held());
  Acquire("k3", Hold::kOwn, &own2);
  EXPECT_FALSE(own2.held());
  own.Release();
  Run();
  EXPECT_TRUE(own2.held());
  Acquire("k4", Hold::kShared, &shared2);
  EXPECT_TRUE(shared2.held()) << "shared beside shared and kOwn holders, nobody waiting";
  for (KeyLease* l : {&shared, &own2, &shared2}) l->Release();
  EXPECT_EQ(q.active_keys(), 0u);
}

// The bound (here 1) counts the entries a write would hold kExclusive or
// kOwn only.
TEST_F(KeyQueueHolds, TheBoundIgnoresSharedWaiters) {
  KeyLease x, a, b, refused;
  Acquire("k0", Hold::kExclusive, &x);
  Acquire("k1", Hold::kShared, &a);
  Acquire("k2", Hold::kShared, &b);  // a second shared waiter: not bounded
  EXPECT_EQ(q.waiting(), 2u);
  Acquire("k3", Hold::kExclusive, &refused);
  EXPECT_FALSE(refused.held()) << "an exclusive request beyond the bound";
  x.Release();
  Run();
  EXPECT_TRUE(a.held() && b.held());
  a.Release();
  b.Release();
  EXPECT_EQ(q.active_keys(), 0u);
}

}  // namespace
}  // namespace fencegate::proxy
