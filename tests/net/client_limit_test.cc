#include "net/client_limit.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace fencegate::proxy {
namespace {

namespace ip = boost::asio::ip;

TEST(ClientLimiter, RefusesBeyondTheLimitPerAddress) {
  ClientLimiter limiter(2);
  auto a = ip::make_address("10.0.0.1");
  auto b = ip::make_address("10.0.0.2");
  auto s1 = limiter.TryAcquire(a);
  auto s2 = limiter.TryAcquire(a);
  ASSERT_TRUE(s1 && s2);
  EXPECT_TRUE(s1->held() && s2->held());
  EXPECT_FALSE(limiter.TryAcquire(a));  // a third from the same address
  EXPECT_TRUE(limiter.TryAcquire(b));   // another address has its own budget
  EXPECT_EQ(limiter.count(a), 2u);
  s1.reset();  // a connection ends: its slot comes back
  EXPECT_EQ(limiter.count(a), 1u);
  EXPECT_TRUE(limiter.TryAcquire(a));
}

TEST(ClientLimiter, MappedIpv6CountsAsIpv4) {
  ClientLimiter limiter(1);
  auto slot = limiter.TryAcquire(ip::make_address("127.0.0.1"));
  ASSERT_TRUE(slot);
  EXPECT_FALSE(limiter.TryAcquire(ip::make_address("::ffff:127.0.0.1")));
  EXPECT_TRUE(limiter.TryAcquire(ip::make_address("::1")));
}

TEST(ClientLimiter, ZeroMeansNoLimitAndCountsNothing) {
  ClientLimiter limiter(0);
  std::vector<ClientSlot> slots;
  for (int i = 0; i < 1000; ++i) {
    auto s = limiter.TryAcquire(ip::make_address("10.0.0.1"));
    ASSERT_TRUE(s);
    EXPECT_FALSE(s->held());
    slots.push_back(std::move(*s));
  }
  EXPECT_EQ(limiter.clients(), 0u);
}

TEST(ClientLimiter, MovedSlotReleasesOnce) {
  ClientLimiter limiter(1);
  auto a = ip::make_address("10.0.0.1");
  ClientSlot outer;
  {
    auto s = limiter.TryAcquire(a);
    ASSERT_TRUE(s);
    outer = std::move(*s);
  }  // the moved-from slot gives nothing back
  EXPECT_EQ(limiter.count(a), 1u);
  outer.Release();
  outer.Release();
  EXPECT_EQ(limiter.count(a), 0u);
  EXPECT_EQ(limiter.clients(), 0u);
}

// Many threads take and give back slots for a few addresses: the counts
// never exceed the limit and end at zero (run under TSan in tests/tsan.sh).
TEST(ClientLimiter, ConcurrentAcquireAndRelease) {
  constexpr uint64_t kLimit = 3;
  ClientLimiter limiter(kLimit);
  std::vector<std::thread> threads;
  std::atomic<bool> over{false};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      auto address = ip::make_address_v4(static_cast<uint32_t>(0x0a000001 + t % 2));
      for (int i = 0; i < 2000; ++i) {
        auto slot = limiter.TryAcquire(address);
        if (limiter.count(address) > kLimit) over = true;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_FALSE(over.load());
  EXPECT_EQ(limiter.clients(), 0u);
}

}  // namespace
}  // namespace fencegate::proxy
