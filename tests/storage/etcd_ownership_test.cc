// EtcdStore's ownership of keys between replicas (etcd_store.h,
// "Ownership"), against a real etcd: a key is decided by one replica at a
// time, passes only once its owner gives it up (Disown), closes, or loses
// its lease, and a write that waits keeps its order.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "storage/etcd_client.h"
#include "storage/etcd_store.h"
#include "tests/storage/test_util.h"
#include "tests/support/etcd_process.h"

namespace fencegate::storage {
namespace {

using fencegate::testing::EtcdCluster;
using Clock = std::chrono::steady_clock;

struct Decided {
  Status status;
  Fence fence;
};

class Transport : public EtcdTransport {
 public:
  explicit Transport(std::unique_ptr<EtcdClient> client,
                     std::shared_ptr<std::atomic<bool>> cut = nullptr)
      : client_(std::move(client)), cut_(std::move(cut)) {}
  Status Call(std::string_view path, const nlohmann::json& request, nlohmann::json* response,
              bool retry_if_unknown, Deadline deadline) override {
    if (cut_ && cut_->load()) return Status::Unavailable("cut off from etcd");
    return client_->Call(path, request, response, retry_if_unknown, nullptr, deadline);
  }

 private:
  std::unique_ptr<EtcdClient> client_;
  std::shared_ptr<std::atomic<bool>> cut_;  // set: every call fails, as with etcd down
};

class EtcdOwnershipTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string error;
    cluster_ = EtcdCluster::Start({}, &error).release();
    ASSERT_NE(cluster_, nullptr) << error;
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(cluster_, nullptr);
    prefix_ = "own/" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) +
              "/";
  }

  static std::unique_ptr<EtcdClient> Client() {
    EtcdClientOptions options;
    options.endpoints = cluster_->endpoints();
    options.request_timeout = std::chrono::milliseconds(10000);
    std::unique_ptr<EtcdClient> client;
    Status s = EtcdClient::Open(options, &client);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return client;
  }

  std::unique_ptr<EtcdStore> Open(const std::string& name,
                                  std::chrono::milliseconds wait = std::chrono::seconds(20),
                                  std::chrono::milliseconds release_after =
                                      std::chrono::milliseconds(50),
                                  std::shared_ptr<std::atomic<bool>> cut = nullptr) {
    EtcdStoreOptions options;
    options.prefix = prefix_;
    options.decision_timeout = std::chrono::seconds(30);
    options.ownership.lease_ttl = std::chrono::seconds(2);
    options.ownership.margin = std::chrono::milliseconds(500);
    options.ownership.release_after = release_after;
    options.ownership.wait = wait;
    options.ownership.name = name;
    return std::make_unique<EtcdStore>(std::make_unique<Transport>(Client(), std::move(cut)),
                                       options);
  }

  static std::future<Decided> Advance(TokenStore& store, const std::string& key, uint64_t token,
                                      std::function<void()> on_answer = {}) {
    auto p = std::make_shared<std::promise<Decided>>();
    auto f = p->get_future();
    store.Advance(key, token, [p, on_answer](const Status& s, Fence fence) {
      if (on_answer) on_answer();
      p->set_value({s, fence});
    });
    return f;
  }
  static Decided Get(std::future<Decided>& f) {
    if (f.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
      return {Status::Unavailable("no answer in a minute"), {}};
    }
    return f.get();
  }

  static OwnershipCounters Counts(const TokenStore& store) {
    return store.Counters().value().ownership.value();
  }
  // Polls (no fixed sleep) until `done`, for at most a minute.
  static bool Eventually(const std::function<bool()>& done) {
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    while (Clock::now() < deadline) {
      if (done()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return done();
  }

  static EtcdCluster* cluster_;
  std::string prefix_;
};

EtcdCluster* EtcdOwnershipTest::cluster_ = nullptr;

// A write through the replica that does not own its key is decided only
// once the owner has given the key up, and then under the new owner's
// lease; the owner's own writes never wait.
TEST_F(EtcdOwnershipTest, AWriteWaitsUntilTheOwnerGivesTheKeyUp) {
  auto a = Open("replica-a");
  auto b = Open("replica-b");
  auto first = Advance(*a, "/objects/k", 10);
  Decided owned = Get(first);
  ASSERT_TRUE(owned.status.ok()) << owned.status.ToString();
  ASSERT_TRUE(owned.fence.accepted);
  ASSERT_NE(owned.fence.owner, 0);
  EXPECT_TRUE(a->Forwardable(owned.fence.owner));
  EXPECT_EQ(Counts(*a).takes, 1u);
  EXPECT_EQ(Counts(*a).keys_owned, 1u);

  std::atomic<bool> disowned{false};
  std::atomic<bool> answered_before_disown{false};
  auto moved = Advance(*b, "/objects/k", 11, [&] {
    if (!disowned.load()) answered_before_disown = true;
  });
  ASSERT_TRUE(Eventually([&] { return Counts(*b).waits == 1; }));
  // The owner goes on deciding the key meanwhile.
  auto again = Advance(*a, "/objects/k", 10);
  EXPECT_TRUE(Get(again).fence.accepted);

  disowned = true;
  a->Disown("/objects/k");
  Decided d = Get(moved);
  ASSERT_TRUE(d.status.ok()) << d.status.ToString();
  EXPECT_FALSE(answered_before_disown.load());
  EXPECT_TRUE(d.fence.accepted);
  EXPECT_NE(d.fence.owner, 0);
  EXPECT_NE(d.fence.owner, owned.fence.owner);
  EXPECT_TRUE(b->Forwardable(d.fence.owner));
  EXPECT_FALSE(b->Forwardable(owned.fence.owner));
  EXPECT_EQ(Counts(*b).takes, 1u);
  ASSERT_TRUE(Eventually([&] { return Counts(*a).releases == 1; }));
  EXPECT_EQ(Counts(*a).keys_owned, 0u);
}

// A key nobody waits for stays with its replica however long it is idle
// (release_after an hour here); once another replica waits for it (its
// want in etcd), the owner gives it up as soon as it is idle, and not
// while a write of it is in flight.
TEST_F(EtcdOwnershipTest, AKeyAnotherReplicaWaitsForIsGivenUpOnceIdle) {
  constexpr auto kHour = std::chrono::hours(1);
  auto a = Open("replica-a", std::chrono::seconds(20), kHour);
  auto b = Open("replica-b", std::chrono::milliseconds(500), kHour);
  auto first = Advance(*a, "/objects/busy", 1);
  ASSERT_TRUE(Get(first).fence.accepted);
  // In flight on a (no Disown): b's wait runs out.
  auto refused = Advance(*b, "/objects/busy", 2);
  EXPECT_EQ(Get(refused).status.code(), Status::Code::kMoving);
  EXPECT_EQ(Counts(*a).releases, 0u);
  // Idle on a, and nobody waits: kept.
  auto again = Advance(*a, "/objects/idle", 1);
  ASSERT_TRUE(Get(again).fence.accepted);
  a->Disown("/objects/idle");
  EXPECT_EQ(Counts(*a).releases, 0u);
  // b waits for the idle key: a gives it up.
  auto moved = Advance(*b, "/objects/idle", 2);
  Decided d = Get(moved);
  ASSERT_TRUE(d.status.ok()) << d.status.ToString();
  EXPECT_TRUE(d.fence.accepted);
  EXPECT_EQ(Counts(*a).releases, 1u);
  EXPECT_EQ(Counts(*a).keys_owned, 1u);  // /objects/busy, still in flight
}

// A key used again after it went idle is not given up.
TEST_F(EtcdOwnershipTest, AKeyUsedAgainSinceItWentIdleIsKept) {
  auto a = Open("replica-a");
  auto b = Open("replica-b", std::chrono::milliseconds(300));
  auto first = Advance(*a, "/objects/k", 1);
  ASSERT_TRUE(Get(first).fence.accepted);
  a->Disown("/objects/k");
  auto second = Advance(*a, "/objects/k", 2);
  ASSERT_TRUE(Get(second).fence.accepted);
  // Another key's release shows that the lane has looked at both.
  auto other = Advance(*a, "/objects/other", 1);
  ASSERT_TRUE(Get(other).fence.accepted);
  a->Disown("/objects/other");
  ASSERT_TRUE(Eventually([&] { return Counts(*a).releases == 1; }));
  EXPECT_EQ(Counts(*a).keys_owned, 1u);
  auto refused = Advance(*b, "/objects/k", 3);
  EXPECT_EQ(Get(refused).status.code(), Status::Code::kMoving);
}

// A write that waits longer than ownership.wait is answered Moving, naming
// the owner, and nothing is decided: the token is not stored.
TEST_F(EtcdOwnershipTest, AWaitPastItsLimitIsMovingAndDecidesNothing) {
  auto a = Open("replica-a");
  auto b = Open("replica-b", std::chrono::milliseconds(200));
  auto first = Advance(*a, "/objects/k", 10);
  ASSERT_TRUE(Get(first).fence.accepted);
  auto moved = Advance(*b, "/objects/k", 99);
  Decided d = Get(moved);
  EXPECT_EQ(d.status.code(), Status::Code::kMoving) << d.status.ToString();
  EXPECT_NE(d.status.message().find("replica-a"), std::string::npos) << d.status.message();
  EXPECT_EQ(testing::GetSync(*a, "/objects/k").value, std::optional<uint64_t>(10));
}

// Writes of one key queued behind a waiting one keep their order: 5, 7,
// then 6 (refused, 7 is stored); a write of another key is not held up.
TEST_F(EtcdOwnershipTest, WritesBehindAWaitingOneKeepTheirOrder) {
  auto a = Open("replica-a");
  auto b = Open("replica-b");
  auto first = Advance(*a, "/objects/k", 1);
  ASSERT_TRUE(Get(first).fence.accepted);
  auto five = Advance(*b, "/objects/k", 5);
  auto seven = Advance(*b, "/objects/k", 7);
  auto six = Advance(*b, "/objects/k", 6);
  auto free_key = Advance(*b, "/objects/free", 1);
  Decided f = Get(free_key);
  ASSERT_TRUE(f.status.ok()) << f.status.ToString();
  EXPECT_TRUE(f.fence.accepted);
  EXPECT_EQ(five.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  a->Disown("/objects/k");
  Decided d5 = Get(five);
  Decided d7 = Get(seven);
  Decided d6 = Get(six);
  ASSERT_TRUE(d5.status.ok() && d7.status.ok() && d6.status.ok()) << d6.status.ToString();
  EXPECT_TRUE(d5.fence.accepted);
  EXPECT_TRUE(d7.fence.accepted);
  EXPECT_FALSE(d6.fence.accepted);
  EXPECT_EQ(d6.fence.current, 7u);
}

// Closing a replica revokes its lease: its keys pass at once, without a
// release and without waiting for the lease to run out.
TEST_F(EtcdOwnershipTest, ClosingHandsTheKeysOverAtOnce) {
  auto a = Open("replica-a");
  auto b = Open("replica-b");
  auto first = Advance(*a, "/objects/k", 1);
  ASSERT_TRUE(Get(first).fence.accepted);
  auto moved = Advance(*b, "/objects/k", 2);
  ASSERT_TRUE(Eventually([&] { return Counts(*b).waits == 1; }));
  ASSERT_TRUE(a->Close().ok());
  Decided d = Get(moved);
  ASSERT_TRUE(d.status.ok()) << d.status.ToString();
  EXPECT_TRUE(d.fence.accepted);
}

// When etcd ends a replica's lease (here revoked behind its back, as a
// partition longer than the TTL would), its keys are free at once, and the
// replica stops forwarding what it decided under that lease as soon as its
// keep-alive learns it; later writes take a new lease.
TEST_F(EtcdOwnershipTest, AnEndedLeaseIsNeverForwardedAgain) {
  auto a = Open("replica-a");
  auto b = Open("replica-b");
  auto first = Advance(*a, "/objects/k", 1);
  Decided owned = Get(first);
  ASSERT_TRUE(owned.fence.accepted);
  nlohmann::json answer;
  ASSERT_TRUE(Client()
                  ->Call("/v3/lease/revoke", {{"ID", std::to_string(owned.fence.owner)}}, &answer,
                         true)
                  .ok());
  auto taken = Advance(*b, "/objects/k", 2);
  Decided d = Get(taken);
  ASSERT_TRUE(d.status.ok()) << d.status.ToString();
  EXPECT_TRUE(d.fence.accepted);
  EXPECT_EQ(Counts(*b).waits, 0u);
  ASSERT_TRUE(Eventually([&] { return !a->Forwardable(owned.fence.owner); }));
  EXPECT_EQ(Counts(*a).lost, 1u);
  b->Disown("/objects/k");
  auto back = Advance(*a, "/objects/k", 3);
  Decided again = Get(back);
  ASSERT_TRUE(again.status.ok()) << again.status.ToString();
  EXPECT_TRUE(again.fence.accepted);
  EXPECT_NE(again.fence.owner, owned.fence.owner);
  EXPECT_TRUE(a->Forwardable(again.fence.owner));
}

// A replica cut off from etcd long enough for its lease to lapse by its own
// clock renews the lease (or takes a new one, if etcd ended it) before it
// decides the first write after etcd is back: that write is forwardable,
// not decided under a lease it may no longer forward with.
TEST_F(EtcdOwnershipTest, AWriteAfterEtcdComesBackIsDecidedUnderARenewedLease) {
  auto cut = std::make_shared<std::atomic<bool>>(false);
  auto a = Open("replica-a", std::chrono::seconds(20), std::chrono::seconds(30), cut);
  auto first = Advance(*a, "/objects/k", 1);
  Decided owned = Get(first);
  ASSERT_TRUE(owned.status.ok()) << owned.status.ToString();
  ASSERT_TRUE(a->Forwardable(owned.fence.owner));
  cut->store(true);
  ASSERT_TRUE(Eventually([&] { return !a->Forwardable(owned.fence.owner); }));
  cut->store(false);
  auto next = Advance(*a, "/objects/k", 2);
  Decided d = Get(next);
  ASSERT_TRUE(d.status.ok()) << d.status.ToString();
  EXPECT_TRUE(d.fence.accepted);
  EXPECT_TRUE(a->Forwardable(d.fence.owner));
}

// A write of several keys waits for each key another replica owns.
TEST_F(EtcdOwnershipTest, AWriteOfSeveralKeysWaitsForEveryOne) {
  auto a = Open("replica-a");
  auto b = Open("replica-b");
  auto first = Advance(*a, "/objects/dst", 1);
  ASSERT_TRUE(Get(first).fence.accepted);
  auto p = std::make_shared<std::promise<std::pair<Status, BatchFence>>>();
  auto f = p->get_future();
  std::atomic<bool> disowned{false};
  std::atomic<bool> early{false};
  b->AdvanceAll({{"/objects/src", 4}, {"/objects/dst", 4}},
                [p, &disowned, &early](const Status& s, BatchFence batch) {
                  if (!disowned.load()) early = true;
                  p->set_value({s, std::move(batch)});
                });
  ASSERT_TRUE(Eventually([&] { return Counts(*b).waits == 1; }));
  disowned = true;
  a->Disown("/objects/dst");
  ASSERT_EQ(f.wait_for(std::chrono::seconds(60)), std::future_status::ready);
  auto [status, batch] = f.get();
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_FALSE(early.load());
  EXPECT_TRUE(batch.accepted);
  EXPECT_TRUE(b->Forwardable(batch.owner));
  EXPECT_EQ(Counts(*b).takes, 2u);
}

// fencegate's own keys (the lock service's counters, "\0locks/...") are
// never forwarded, so nobody owns them: two replicas' lock services advance
// one counter side by side.
TEST_F(EtcdOwnershipTest, TheLockServicesCountersAreOwnedByNobody) {
  auto a = Open("replica-a", std::chrono::milliseconds(200));
  auto b = Open("replica-b", std::chrono::milliseconds(200));
  const std::string counter("\0locks/jobs", 11);
  auto first = Advance(*a, counter, 1);
  Decided d1 = Get(first);
  ASSERT_TRUE(d1.status.ok()) << d1.status.ToString();
  EXPECT_EQ(d1.fence.owner, 0);
  auto second = Advance(*b, counter, 2);
  Decided d2 = Get(second);
  ASSERT_TRUE(d2.status.ok()) << d2.status.ToString();
  EXPECT_TRUE(d2.fence.accepted);
  EXPECT_EQ(Counts(*b).waits, 0u);
  EXPECT_EQ(Counts(*a).keys_owned, 0u);
}

TreeWrite PutAt(const std::string& path, uint64_t token, bool subtree = false) {
  TreeWrite w;
  w.keys = {path};
  w.token = token;
  w.targets = {{path, path, subtree, Nesting::kShared}};
  return w;
}

// The tree under nesting: shared: a replica owns a first segment; a write
// anywhere below it through another replica waits, one below another
// segment does not (nor one under per_key), and a subtree write of the
// root waits for every segment another replica owns.
TEST_F(EtcdOwnershipTest, TreeWritesOwnTheirFirstSegment) {
  auto a = Open("replica-a", std::chrono::milliseconds(300));
  auto b = Open("replica-b", std::chrono::milliseconds(300));
  ASSERT_EQ(testing::AdvanceTreeSync(*a, PutAt("/t/x/1", 5)).verdict.kind,
            TreeVerdict::Kind::kAccepted);
  testing::TreeResult below = testing::AdvanceTreeSync(*b, PutAt("/t/y", 6));
  EXPECT_EQ(below.status.code(), Status::Code::kMoving) << below.status.ToString();
  testing::TreeResult elsewhere = testing::AdvanceTreeSync(*b, PutAt("/u/z", 6));
  ASSERT_TRUE(elsewhere.status.ok()) << elsewhere.status.ToString();
  EXPECT_EQ(elsewhere.verdict.kind, TreeVerdict::Kind::kAccepted);
  EXPECT_NE(elsewhere.verdict.owner, 0);
  // A route under nesting: per_key owns its keys only.
  TreeWrite per_key = PutAt("/t/k", 6);
  per_key.targets[0].nesting = Nesting::kPerKey;
  testing::TreeResult own_key = testing::AdvanceTreeSync(*b, per_key);
  ASSERT_TRUE(own_key.status.ok()) << own_key.status.ToString();
  EXPECT_EQ(own_key.verdict.kind, TreeVerdict::Kind::kAccepted);
  testing::TreeResult root = testing::AdvanceTreeSync(*a, PutAt("/", 7, /*subtree=*/true));
  EXPECT_EQ(root.status.code(), Status::Code::kMoving) << root.status.ToString();
  // Once the collection /t is idle on a, b may write below it.
  a->Disown(TreeKeyOf("/t"));
  ASSERT_TRUE(Eventually([&] { return Counts(*a).releases == 1; }));
  testing::TreeResult moved = testing::AdvanceTreeSync(*b, PutAt("/t/y", 6));
  ASSERT_TRUE(moved.status.ok()) << moved.status.ToString();
  EXPECT_EQ(moved.verdict.kind, TreeVerdict::Kind::kAccepted);
}

}  // namespace
}  // namespace fencegate::storage
