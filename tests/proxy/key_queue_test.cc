#include "proxy/key_queue.h"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <chrono>
#include <future>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "tests/proxy/shard_keys.h"

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
// sessions move towards the keys they keep waiting for (HttpSession).
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

}  // namespace
}  // namespace fencegate::proxy
