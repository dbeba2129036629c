// LockService with a fake clock and an in-memory store: exclusion, expiry,
// renew/release by the right lease only, waiting acquires, and tokens that
// keep increasing across a new service on the same store (a restart).

#include "locks/lock_service.h"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <future>
#include <chrono>
#include <memory>
#include <optional>

#include "storage/fault_injecting_store.h"
#include "storage/memory_store.h"

namespace fencegate::locks {
namespace {

using namespace std::chrono_literals;
using Pending = std::shared_ptr<std::optional<LockResult>>;

class FakeClock : public Clock {
 public:
  TimePoint Now() const override { return now_; }
  void Advance(Duration d) { now_ += d; }

 private:
  TimePoint now_ = TimePoint{} + 1h;
};

class LockServiceTest : public ::testing::Test {
 protected:
  LockServiceTest() { service_ = std::make_unique<LockService>(ioc_.get_executor(), store_, clock_); }

  // Starts an operation; its result appears in the returned slot.
  Pending Acquire(const std::string& name, Duration ttl, Duration wait = 0ms) {
    auto out = std::make_shared<std::optional<LockResult>>();
    service_->Acquire(name, ttl, wait, [out](const LockResult& r) { *out = r; });
    return out;
  }
  LockResult Renew(const std::string& name, uint64_t lease) {
    std::optional<LockResult> out;
    service_->Renew(name, lease, [&](const LockResult& r) { out = r; });
    EXPECT_TRUE(out) << "renew answers at once";
    return out.value_or(LockResult{});
  }
  LockResult Release(const std::string& name, uint64_t lease) {
    std::optional<LockResult> out;
    service_->Release(name, lease, [&](const LockResult& r) { out = r; });
    EXPECT_TRUE(out) << "release answers at once";
    return out.value_or(LockResult{});
  }
  // Runs the io_context until the operation has answered (store answers
  // arrive from another thread), with a deadline instead of a sleep.
  LockResult Await(const Pending& p) {
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!*p && std::chrono::steady_clock::now() < deadline) {
      if (ioc_.stopped()) ioc_.restart();
      ioc_.run_one_for(100ms);
    }
    EXPECT_TRUE(*p) << "no answer within 10s";
    return p->value_or(LockResult{});
  }
  LockResult AcquireNow(const std::string& name, Duration ttl, Duration wait = 0ms) {
    return Await(Acquire(name, ttl, wait));
  }
  // Lets every store answer already under way arrive.
  void Settle() {
    if (ioc_.stopped()) ioc_.restart();
    ioc_.run_for(50ms);
  }

  boost::asio::io_context ioc_;  // declared first: outlives the service
  // The in-memory engine, behind faults a test may turn on.
  storage::FaultInjectingStore store_{std::make_unique<storage::MemoryStore>()};
  FakeClock clock_;
  std::unique_ptr<LockService> service_;
};

TEST_F(LockServiceTest, MutualExclusionWhileTheLeaseLives) {
  LockResult a = AcquireNow("orders", 10s);
  ASSERT_EQ(a.error, LockError::kNone);
  EXPECT_EQ(a.token, 1u);
  EXPECT_NE(a.lease, 0u);
  EXPECT_EQ(a.expires_in, 10s);

  clock_.Advance(9s);
  LockResult b = AcquireNow("orders", 10s);
  EXPECT_EQ(b.error, LockError::kHeld);
  EXPECT_EQ(b.expires_in, 1s) << "the holder's remaining time";

  // Another name is independent and counts its own tokens.
  LockResult other = AcquireNow("invoices", 10s);
  ASSERT_EQ(other.error, LockError::kNone);
  EXPECT_EQ(other.token, 1u);
  EXPECT_EQ(service_->held_count(), 2u);
}

TEST_F(LockServiceTest, ExpiresAfterTtlWithoutRenewal) {
  LockResult a = AcquireNow("orders", 2s);
  ASSERT_EQ(a.error, LockError::kNone);
  clock_.Advance(1999ms);
  service_->ExpireDue();
  EXPECT_EQ(AcquireNow("orders", 2s).error, LockError::kHeld) << "1 ms before expiry";

  clock_.Advance(1ms);
  service_->ExpireDue();
  EXPECT_EQ(service_->held_count(), 0u);
  LockResult b = AcquireNow("orders", 2s);
  ASSERT_EQ(b.error, LockError::kNone);
  EXPECT_EQ(b.token, a.token + 1);
  EXPECT_NE(b.lease, a.lease);

  // The expired lease can do nothing, and says why.
  EXPECT_EQ(Renew("orders", a.lease).error, LockError::kLeaseExpired);
  EXPECT_EQ(Release("orders", a.lease).error, LockError::kLeaseExpired);
  EXPECT_EQ(Renew("orders", b.lease).error, LockError::kNone);
}

TEST_F(LockServiceTest, ExpiryDoesNotNeedTheTimer) {
  // Every call expires what is due first, so a late timer never extends a lease.
  LockResult a = AcquireNow("orders", 1s);
  clock_.Advance(1s);
  LockResult b = AcquireNow("orders", 1s);
  ASSERT_EQ(b.error, LockError::kNone);
  EXPECT_EQ(b.token, a.token + 1);
}

TEST_F(LockServiceTest, RenewRestartsTheTtl) {
  LockResult a = AcquireNow("orders", 10s);
  clock_.Advance(8s);
  LockResult r = Renew("orders", a.lease);
  ASSERT_EQ(r.error, LockError::kNone);
  EXPECT_EQ(r.token, a.token);
  EXPECT_EQ(r.lease, a.lease);
  EXPECT_EQ(r.expires_in, 10s);
  clock_.Advance(8s);  // 16s after the grant, 8s after the renew
  EXPECT_EQ(AcquireNow("orders", 10s).error, LockError::kHeld);
  clock_.Advance(2s);
  EXPECT_EQ(AcquireNow("orders", 10s).error, LockError::kNone);
}

TEST_F(LockServiceTest, RenewAndReleaseByAWrongLeaseAreRefused) {
  LockResult a = AcquireNow("orders", 10s);
  ASSERT_EQ(a.error, LockError::kNone);
  EXPECT_EQ(Renew("orders", a.lease + 1).error, LockError::kUnknownLease);
  EXPECT_EQ(Release("orders", a.lease + 1).error, LockError::kUnknownLease);
  EXPECT_EQ(Release("orders", 0).error, LockError::kUnknownLease);
  EXPECT_EQ(Renew("never-seen", a.lease).error, LockError::kUnknownLease);
  EXPECT_EQ(Release("never-seen", a.lease).error, LockError::kUnknownLease);
  // The lease of another lock does not work on this one.
  LockResult other = AcquireNow("invoices", 10s);
  EXPECT_EQ(Release("orders", other.lease).error, LockError::kUnknownLease);
  // The holder still holds.
  EXPECT_EQ(AcquireNow("orders", 10s).error, LockError::kHeld);
  EXPECT_EQ(Renew("orders", a.lease).error, LockError::kNone);
}

TEST_F(LockServiceTest, ReleaseFreesAndTokensIncrease) {
  uint64_t last = 0;
  for (int i = 0; i < 5; ++i) {
    LockResult a = AcquireNow("orders", 10s);
    ASSERT_EQ(a.error, LockError::kNone);
    EXPECT_GT(a.token, last);
    last = a.token;
    LockResult r = Release("orders", a.lease);
    ASSERT_EQ(r.error, LockError::kNone);
    EXPECT_EQ(r.token, a.token);
    // A released lease is gone.
    EXPECT_EQ(Release("orders", a.lease).error, LockError::kUnknownLease);
  }
  EXPECT_EQ(last, 5u);
}

TEST_F(LockServiceTest, WaitingAcquireIsGrantedOnRelease) {
  LockResult a = AcquireNow("orders", 10s);
  Pending b = Acquire("orders", 3s, /*wait=*/5s);
  Settle();
  EXPECT_FALSE(*b) << "waits while the lock is held";
  clock_.Advance(1s);
  ASSERT_EQ(Release("orders", a.lease).error, LockError::kNone);
  LockResult got = Await(b);
  ASSERT_EQ(got.error, LockError::kNone);
  EXPECT_EQ(got.token, a.token + 1);
  EXPECT_EQ(got.expires_in, 3s) << "the waiter's own ttl";
}

TEST_F(LockServiceTest, WaitingAcquireIsGrantedOnExpiry) {
  LockResult a = AcquireNow("orders", 2s);
  Pending b = Acquire("orders", 10s, 5s);
  Pending c = Acquire("orders", 10s, 5s);
  clock_.Advance(2s);
  service_->ExpireDue();
  LockResult got = Await(b);
  ASSERT_EQ(got.error, LockError::kNone) << "first waiter first";
  EXPECT_EQ(got.token, a.token + 1);
  Settle();
  EXPECT_FALSE(*c) << "second waiter still waits";
  ASSERT_EQ(Release("orders", got.lease).error, LockError::kNone);
  EXPECT_EQ(Await(c).token, a.token + 2);
}

TEST_F(LockServiceTest, WaitRunsOutWhileHeld) {
  LockResult a = AcquireNow("orders", 10s);
  Pending b = Acquire("orders", 10s, 2s);
  clock_.Advance(1999ms);
  service_->ExpireDue();
  Settle();
  EXPECT_FALSE(*b);
  clock_.Advance(1ms);
  service_->ExpireDue();
  LockResult got = Await(b);
  EXPECT_EQ(got.error, LockError::kHeld);
  // The holder's lease has 8 s left, as an acquire without a wait would say.
  EXPECT_EQ(got.expires_in, Duration(8000));
  EXPECT_EQ(Renew("orders", a.lease).error, LockError::kNone);
}

TEST_F(LockServiceTest, TokensContinueAboveTheStoreAfterARestart) {
  for (int i = 0; i < 3; ++i) {
    LockResult a = AcquireNow("orders", 10s);
    ASSERT_EQ(a.error, LockError::kNone);
    ASSERT_EQ(Release("orders", a.lease).error, LockError::kNone);
  }
  LockResult held = AcquireNow("orders", 10s);  // token 4, held at the "crash"
  ASSERT_EQ(held.token, 4u);
  // A new process on the same data: no lease survives, the counter does.
  service_ = std::make_unique<LockService>(ioc_.get_executor(), store_, clock_);
  EXPECT_EQ(Renew("orders", held.lease).error, LockError::kUnknownLease);
  LockResult next = AcquireNow("orders", 10s);
  ASSERT_EQ(next.error, LockError::kNone);
  EXPECT_EQ(next.token, 5u);
}

TEST_F(LockServiceTest, AdminRaisedCounterIsRespected) {
  auto raise = [&](uint64_t to) {
    auto done = std::make_shared<std::promise<void>>();
    auto raised = done->get_future();
    store_.Raise(LockStoreKey("orders"), to,
                 [done](const storage::Status&, storage::Fence) { done->set_value(); });
    raised.wait();
  };
  raise(100);
  LockResult a = AcquireNow("orders", 10s);
  EXPECT_EQ(a.token, 101u);
  ASSERT_EQ(Release("orders", a.lease).error, LockError::kNone);
  raise(500);  // while the service has 101 cached
  EXPECT_EQ(AcquireNow("orders", 10s).token, 501u);
}

TEST_F(LockServiceTest, StoreFailureRefusesTheGrantAndLeavesTheLockFree) {
  store_.SetFaults({.fail_writes = true});
  LockResult a = AcquireNow("orders", 10s);
  EXPECT_EQ(a.error, LockError::kStore);
  EXPECT_FALSE(a.status.ok());
  EXPECT_EQ(service_->held_count(), 0u);
  store_.SetFaults({});
  LockResult b = AcquireNow("orders", 10s);
  ASSERT_EQ(b.error, LockError::kNone);
  EXPECT_EQ(b.token, 1u);
}

TEST_F(LockServiceTest, AcquireDuringAGrantInFlightSeesTheLockHeld) {
  Pending a = Acquire("orders", 10s);  // store write under way
  LockResult b = AcquireNow("orders", 10s);
  EXPECT_EQ(b.error, LockError::kHeld);
  EXPECT_EQ(Await(a).error, LockError::kNone);
}

TEST_F(LockServiceTest, ShutdownAnswersWaitersAndRefusesNewCalls) {
  LockResult a = AcquireNow("orders", 10s);
  Pending b = Acquire("orders", 10s, 5s);
  service_->Shutdown();
  EXPECT_EQ(Await(b).error, LockError::kShuttingDown);
  EXPECT_EQ(AcquireNow("other", 10s).error, LockError::kShuttingDown);
  EXPECT_EQ(Renew("orders", a.lease).error, LockError::kShuttingDown);
}

}  // namespace
}  // namespace fencegate::locks
