// How many heap allocations the fenced write path makes on the thread that
// serves it (docs/performance.md: each costs about 150 instructions with its
// free, a fenced write's whole fence about 19,000).
// This binary replaces the global operator new to count them
// (alloc_count_hooks.cc); it holds only these tests, so that no other test
// runs with the replacement.

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <string>
#include <vector>

#include "fence/fence_filter.h"
#include "fence/key_queue.h"
#include "fence/router.h"
#include "storage/memory_store.h"
#include "tests/fence/shard_keys.h"

namespace fencegate::testing {
long AllocationsOnThisThread();  // alloc_count_hooks.cc
}  // namespace fencegate::testing

namespace fencegate::proxy {
namespace {

namespace http = boost::beast::http;

// Allocations on this thread while `fn` runs.
template <class Fn>
long CountAllocations(Fn&& fn) {
  const long before = testing::AllocationsOnThisThread();
  fn();
  return testing::AllocationsOnThisThread() - before;
}

// A new key, on the thread that runs the io_context (as an I/O thread
// acquires for its own session): granted inside Acquire, and released.
// After the first key of the shard, its entry is reused: nothing allocated.
TEST(Allocations, AFreeKeysAcquireAndReleaseAllocateNothing) {
  boost::asio::io_context ioc;
  KeyQueue q;
  const std::vector<std::string> keys = testing::KeysOfOneShard("/objects/tenant/key-", 3);
  std::vector<long> counts;
  boost::asio::post(ioc, [&] {
    for (const std::string& key : keys) {
      counts.push_back(CountAllocations([&] {
        KeyLease held;
        q.Acquire(key, ioc.get_executor(), [&](KeyLease l) { held = std::move(l); });
        EXPECT_TRUE(held.held());
      }));
    }
  });
  ioc.run();
  ASSERT_EQ(counts.size(), 3u);
  EXPECT_GT(counts[0], 0) << "the count sees nothing: the test proves nothing";
  EXPECT_EQ(counts[1], 0);
  EXPECT_EQ(counts[2], 0);
}

// A fenced write whose key is free and whose store answers at once, on the
// I/O thread, from Check to its verdict. What it allocates, by design: the
// PendingFence, its copy of the key, the key's-turn std::function (it holds
// the PendingFence's shared_ptr) and the copy of the key that
// TokenStore::Advance takes. The store's handler and the relay hold plain
// pointers and stay inside their std::function; the key queue reuses its
// entries (above).
TEST(Allocations, AFencedWriteOnAFreeKeyAllocatesFourTimes) {
  std::string error;
  config::RouteConfig route;
  route.name = "objects";
  route.path_prefix = "/objects/";
  route.nesting = config::RouteNesting::kOff;  // one key, no tree of paths
  auto router = Router::Build({route}, &error);
  ASSERT_TRUE(router) << error;
  // Decides every Advance at once, on the caller's thread, as the RocksDB
  // store does under async durability when it is idle.
  storage::MemoryStore store(storage::MemoryStoreOptions{.answer_on_caller = true});
  KeyQueue queue;
  FenceFilter filter(store, queue);
  FenceSettings settings;
  boost::asio::io_context ioc;
  std::vector<long> counts;
  std::vector<bool> forwarded;
  const std::string whole_request = "PUT /objects/tenant/key HTTP/1.1\r\n\r\n";
  // Keys of one shard and one length: the second and third reuse the key
  // queue entry of the one before (a new key of another shard would cost
  // the entry and its key, two allocations, until that shard has spares).
  const std::vector<std::string> paths = testing::KeysOfOneShard("/objects/tenant/key-number-", 3);
  boost::asio::post(ioc, [&] {
    for (int i = 0; i < 3; ++i) {
      http::fields headers;
      headers.set("Fencing-Token", std::to_string(100 + i));
      const std::string& path = paths[i];
      WriteIntent intent = Classify(settings, *router, "PUT", path, headers);
      ASSERT_EQ(intent.kind, WriteIntent::Kind::kFence);
      // The store holds the key already: its own entry for a new key is the
      // store's cost, not the write path's, and is not counted.
      store.Raise(intent.key, 0, [](const storage::Status&, storage::Fence) {});
      FenceVerdict verdict;
      counts.push_back(CountAllocations([&] {
        filter.Check(intent, ioc.get_executor(), [&](FenceVerdict v) { verdict = std::move(v); },
                     whole_request);
      }));
      forwarded.push_back(verdict.forward);
      verdict.lease.Release();
    }
  });
  ioc.run();
  ASSERT_EQ(counts.size(), 3u);
  EXPECT_EQ(forwarded, (std::vector<bool>{true, true, true}));
  EXPECT_EQ(counts[1], 4);
  EXPECT_EQ(counts[2], 4);
}

}  // namespace
}  // namespace fencegate::proxy
