// EtcdStore against a real etcd (tests/support/etcd_process.h): the token
// store contract over etcd, two stores sharing one fence as two replicas
// would, group commit, and failing closed while etcd is gone.

#include "storage/etcd_store.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <future>
#include <mutex>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "storage/etcd_client.h"
#include "tests/storage/test_util.h"
#include "tests/support/etcd_process.h"

namespace fencegate::storage {
namespace {

using fencegate::testing::EtcdCluster;

struct Answer {
  Status status;
  Fence fence;
};

Answer AdvanceSync(TokenStore& store, const std::string& key, uint64_t token) {
  std::promise<Answer> p;
  store.Advance(key, token, [&](const Status& s, Fence f) { p.set_value({s, f}); });
  return p.get_future().get();
}

Answer RaiseSync(TokenStore& store, const std::string& key, uint64_t token) {
  std::promise<Answer> p;
  store.Raise(key, token, [&](const Status& s, Fence f) { p.set_value({s, f}); });
  return p.get_future().get();
}

std::pair<Status, std::optional<uint64_t>> GetSync(TokenStore& store, const std::string& key) {
  std::promise<std::pair<Status, std::optional<uint64_t>>> p;
  store.Get(key, [&](const Status& s, std::optional<uint64_t> v) { p.set_value({s, v}); });
  return p.get_future().get();
}

std::pair<Status, BatchFence> AdvanceAllSync(TokenStore& store, std::vector<KeyToken> items) {
  std::promise<std::pair<Status, BatchFence>> p;
  store.AdvanceAll(std::move(items), [&](const Status& s, BatchFence f) {
    p.set_value({s, std::move(f)});
  });
  return p.get_future().get();
}

// Counts the transactions the store sends, to see batching.
class CountingTransport : public EtcdTransport {
 public:
  explicit CountingTransport(std::unique_ptr<EtcdClient> client) : client_(std::move(client)) {}
  Status Call(std::string_view path, const nlohmann::json& request, nlohmann::json* response,
              bool retry_if_unknown, Deadline deadline) override {
    calls.fetch_add(1);
    return client_->Call(path, request, response, retry_if_unknown, nullptr, deadline);
  }
  std::atomic<int> calls{0};

 private:
  std::unique_ptr<EtcdClient> client_;
};

class EtcdStoreTest : public ::testing::Test {
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
    prefix_ = "test/" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "/";
  }

  // Two replicas that judge one key's writes side by side: without
  // ownership, which would have one wait for the other's key (the key
  // queue's release, etcd_ownership_test.cc).
  std::unique_ptr<EtcdStore> OpenUnowned() {
    return Open(nullptr, std::chrono::milliseconds(10000), EtcdStoreOptions{}.max_batch, false);
  }

  // Generous: a call to etcd must not time out on a busy machine.
  std::unique_ptr<EtcdStore> Open(CountingTransport** counting = nullptr,
                                  std::chrono::milliseconds timeout = std::chrono::milliseconds(10000),
                                  size_t max_batch = EtcdStoreOptions{}.max_batch,
                                  bool ownership = true) {
    EtcdClientOptions options;
    options.endpoints = cluster_->endpoints();
    options.request_timeout = timeout;
    std::unique_ptr<EtcdClient> client;
    Status s = EtcdClient::Open(options, &client);
    EXPECT_TRUE(s.ok()) << s.ToString();
    auto transport = std::make_unique<CountingTransport>(std::move(client));
    if (counting != nullptr) *counting = transport.get();
    EtcdStoreOptions store_options;
    store_options.prefix = prefix_;
    store_options.max_batch = max_batch;
    store_options.ownership.enabled = ownership;
    return std::make_unique<EtcdStore>(std::move(transport), store_options);
  }

  static EtcdCluster* cluster_;
  std::string prefix_;
};

EtcdCluster* EtcdStoreTest::cluster_ = nullptr;

TEST(EtcdStoreTokens, TwentyDigitsKeepTheOrderOfNumbers) {
  EXPECT_EQ(EtcdStore::EncodeToken(0), "00000000000000000000");
  EXPECT_EQ(EtcdStore::EncodeToken(34), "00000000000000000034");
  EXPECT_EQ(EtcdStore::EncodeToken(UINT64_MAX), "18446744073709551615");
  EXPECT_LT(EtcdStore::EncodeToken(9), EtcdStore::EncodeToken(10));
  uint64_t t = 0;
  EXPECT_TRUE(EtcdStore::DecodeToken("18446744073709551615", &t));
  EXPECT_EQ(t, UINT64_MAX);
  EXPECT_FALSE(EtcdStore::DecodeToken("18446744073709551616", &t));  // past uint64
  EXPECT_FALSE(EtcdStore::DecodeToken("34", &t));
  EXPECT_FALSE(EtcdStore::DecodeToken("0000000000000000003x", &t));
}

TEST_F(EtcdStoreTest, AdvanceCreatesRaisesAndRefusesLower) {
  auto store = Open();
  Answer a = AdvanceSync(*store, "/objects/a", 33);
  ASSERT_TRUE(a.status.ok()) << a.status.ToString();
  EXPECT_TRUE(a.fence.accepted);
  EXPECT_EQ(a.fence.current, 33u);
  EXPECT_TRUE(AdvanceSync(*store, "/objects/a", 33).fence.accepted) << "an equal token passes";
  Answer higher = AdvanceSync(*store, "/objects/a", 34);
  EXPECT_TRUE(higher.fence.accepted);
  EXPECT_EQ(higher.fence.current, 34u);
  Answer stale = AdvanceSync(*store, "/objects/a", 33);
  ASSERT_TRUE(stale.status.ok());
  EXPECT_FALSE(stale.fence.accepted);
  EXPECT_EQ(stale.fence.current, 34u);
  EXPECT_EQ(GetSync(*store, "/objects/a").second, 34u);
  EXPECT_EQ(GetSync(*store, "/objects/never").second, std::nullopt);
  // Raise never refuses and never lowers.
  EXPECT_EQ(RaiseSync(*store, "/objects/a", 20).fence.current, 34u);
  EXPECT_EQ(RaiseSync(*store, "/objects/a", 40).fence.current, 40u);
  EXPECT_FALSE(AdvanceSync(*store, "/objects/a", 39).fence.accepted);
}

TEST_F(EtcdStoreTest, KeysWithAnyBytesAndTheRecordPrefixIsRefused) {
  auto store = Open();
  const std::string odd("k\0ey\xff", 5);
  EXPECT_TRUE(AdvanceSync(*store, odd, 7).fence.accepted);
  EXPECT_EQ(GetSync(*store, odd).second, 7u);
  EXPECT_EQ(GetSync(*store, "k").second, std::nullopt);
  Answer refused = AdvanceSync(*store, std::string(kRecordKeyPrefix) + "x", 1);
  EXPECT_EQ(refused.status.code(), Status::Code::kInvalidArgument);
}

// Two replicas on one etcd: 34 through A, then 33 through B is refused, 35
// through B is accepted and A sees it.
TEST_F(EtcdStoreTest, TwoStoresShareOneFence) {
  auto a = OpenUnowned();
  auto b = OpenUnowned();
  EXPECT_TRUE(AdvanceSync(*a, "/objects/x", 34).fence.accepted);
  Answer late = AdvanceSync(*b, "/objects/x", 33);
  ASSERT_TRUE(late.status.ok());
  EXPECT_FALSE(late.fence.accepted);
  EXPECT_EQ(late.fence.current, 34u);
  EXPECT_TRUE(AdvanceSync(*b, "/objects/x", 35).fence.accepted);
  EXPECT_FALSE(AdvanceSync(*a, "/objects/x", 34).fence.accepted);
}

// Concurrent advances from two stores never let a token below the stored
// one through. Each store writes one call at a time (as one replica's key
// queue does), the two side by side: an accepted token is what is stored
// after it, a refused one is below what is stored, no token is accepted
// below one accepted before it was sent, and the stored value ends as the
// highest accepted.
TEST_F(EtcdStoreTest, ConcurrentReplicasNeverAcceptBelowTheStoredToken) {
  auto a = OpenUnowned();
  auto b = OpenUnowned();
  constexpr int kPerStore = 150;
  std::atomic<uint64_t> highest_accepted{0};
  std::atomic<int> violations{0};
  std::atomic<int> accepted{0};
  auto issue = [&](EtcdStore& store, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < kPerStore; ++i) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      const uint64_t token = 1 + (x >> 40) % 1000;  // tokens go up and down
      const uint64_t floor = highest_accepted.load();
      Answer answer = AdvanceSync(store, "/objects/hot", token);
      if (!answer.status.ok()) {
        violations.fetch_add(1);
        continue;
      }
      const Fence f = answer.fence;
      if (f.accepted) {
        accepted.fetch_add(1);
        if (token < floor || f.current != token) violations.fetch_add(1);
        uint64_t seen = highest_accepted.load();
        while (seen < token && !highest_accepted.compare_exchange_weak(seen, token)) {
        }
      } else if (f.current <= token) {
        violations.fetch_add(1);
      }
    }
  };
  std::thread ta([&] { issue(*a, 1); });
  std::thread tb([&] { issue(*b, 2); });
  ta.join();
  tb.join();
  EXPECT_EQ(violations.load(), 0);
  EXPECT_GT(accepted.load(), 0);
  EXPECT_LT(accepted.load(), 2 * kPerStore) << "tokens went down too: some must be refused";
  EXPECT_EQ(GetSync(*a, "/objects/hot").second, highest_accepted.load());
}

// The tree of paths in etcd: decided as the plain model of the rule
// (tests/storage/tree_model.h), and read back node by node.
TEST_F(EtcdStoreTest, TreeWritesDecideAsTheModel) {
  auto store = Open();
  ASSERT_EQ(testing::TreeDisagreement(*store, 11, 150), "");
  TreeWrite w;
  w.keys = {"/c/z"};
  w.token = 100;
  w.targets = {{"/c/z", "/c/z", false, Nesting::kShared}};
  ASSERT_EQ(testing::AdvanceTreeSync(*store, w).verdict.kind, TreeVerdict::Kind::kAccepted);
  EXPECT_EQ(GetSync(*store, "/c/z").second, 100u);
  testing::NodeResult node = testing::GetNodeSync(*store, "/c");
  ASSERT_TRUE(node.status.ok()) << node.status.ToString();
  ASSERT_TRUE(node.node.has_value());
  EXPECT_EQ(node.node->below_path, "/c/z");
  EXPECT_FALSE(testing::GetNodeSync(*store, "/nowhere").node.has_value());
}

// Queues `writes` tree writes with 4-segment paths under 7 directories, all
// at once, and waits for their answers: how many were accepted.
int QueueTreeWrites(EtcdStore& store, int writes) {
  auto pending = std::make_shared<std::atomic<int>>(writes);
  auto accepted = std::make_shared<std::atomic<int>>(0);
  auto done = std::make_shared<std::promise<void>>();
  for (int i = 0; i < writes; ++i) {
    const std::string path = "/t/" + std::to_string(i % 7) + "/d/" + std::to_string(i);
    TreeWrite w;
    w.keys = {path};
    w.token = 5;
    w.targets = {{path, path, false, Nesting::kPerKey}};
    store.AdvanceTree(std::move(w), [pending, accepted, done](const Status& s, TreeVerdict v) {
      if (s.ok() && v.kind == TreeVerdict::Kind::kAccepted) accepted->fetch_add(1);
      if (pending->fetch_sub(1) == 1) done->set_value();
    });
  }
  done->get_future().wait();
  return accepted->load();
}

// Tree writes queued together are read and written in two transactions,
// however many, up to what one transaction reads (each node the writes
// share read once).
TEST_F(EtcdStoreTest, TreeWritesQueuedTogetherShareTransactions) {
  CountingTransport* counting = nullptr;
  auto store = Open(&counting);
  ASSERT_TRUE(AdvanceSync(*store, "warm", 1).status.ok());
  const int before = counting->calls.load();
  constexpr int kWrites = 120;
  EXPECT_EQ(QueueTreeWrites(*store, kWrites), kWrites);
  const int transactions = counting->calls.load() - before;
  EXPECT_LT(transactions, kWrites / 4) << kWrites << " queued tree writes took " << transactions;
}

// storage.etcd.max_batch bounds a run of tree writes as it bounds one of
// single keys: with 4, 40 queued writes take at least 10 runs, each a
// read and a write transaction.
TEST_F(EtcdStoreTest, ARunOfTreeWritesHoldsAtMostMaxBatch) {
  CountingTransport* counting = nullptr;
  auto store = Open(&counting, std::chrono::milliseconds(10000), /*max_batch=*/4);
  ASSERT_TRUE(AdvanceSync(*store, "warm", 1).status.ok());
  const int before = counting->calls.load();
  constexpr int kWrites = 40;
  EXPECT_EQ(QueueTreeWrites(*store, kWrites), kWrites);
  const int transactions = counting->calls.load() - before;
  EXPECT_GE(transactions, 2 * kWrites / 4) << kWrites << " queued tree writes took " << transactions;
}

// Two replicas on one tree: a subtree write through one never passes a
// write below it accepted through the other (compare-and-set on every
// node read), whatever the interleaving.
TEST_F(EtcdStoreTest, TwoReplicasDecideOneTree) {
  auto a = OpenUnowned();
  auto b = OpenUnowned();
  constexpr int kPerStore = 60;
  std::atomic<int> violations{0};
  auto issue = [&](EtcdStore& store, int seed) {
    for (int i = 0; i < kPerStore; ++i) {
      const uint64_t token = static_cast<uint64_t>(seed * 1000 + i);
      const std::string below = "/s/d/" + std::to_string(seed) + "/" + std::to_string(i);
      TreeWrite put;
      put.keys = {below};
      put.token = token;
      put.targets = {{below, below, false, Nesting::kShared}};
      if (!testing::AdvanceTreeSync(store, put).status.ok()) violations.fetch_add(1);
    }
  };
  std::thread ta([&] { issue(*a, 1); });
  std::thread tb([&] { issue(*b, 2); });
  ta.join();
  tb.join();
  EXPECT_EQ(violations.load(), 0);
  // Every write below /s/d was accepted, the highest with 2059: a subtree
  // write to /s/d below that is refused, one at it accepted.
  TreeWrite del;
  del.keys = {"/s/d"};
  del.token = 2058;
  del.targets = {{"/s/d", "/s/d", true, Nesting::kShared}};
  testing::TreeResult r = testing::AdvanceTreeSync(*a, del);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(r.verdict.kind, TreeVerdict::Kind::kStaleTree);
  EXPECT_EQ(r.verdict.tree_token, 2059u);
  del.token = 2059;
  EXPECT_EQ(testing::AdvanceTreeSync(*b, del).verdict.kind, TreeVerdict::Kind::kAccepted);
}

TEST_F(EtcdStoreTest, CallsQueuedTogetherShareATransaction) {
  CountingTransport* counting = nullptr;
  auto store = Open(&counting);
  ASSERT_TRUE(AdvanceSync(*store, "warm", 1).status.ok());
  const int before = counting->calls.load();
  constexpr int kKeys = 200;
  std::atomic<int> pending{kKeys};
  std::atomic<int> accepted{0};
  std::promise<void> done;
  for (int i = 0; i < kKeys; ++i) {
    store->Advance("/k/" + std::to_string(i), 5, [&](const Status& s, Fence f) {
      if (s.ok() && f.accepted) accepted.fetch_add(1);
      if (pending.fetch_sub(1) == 1) done.set_value();
    });
  }
  done.get_future().wait();
  EXPECT_EQ(accepted.load(), kKeys);
  const int transactions = counting->calls.load() - before;
  EXPECT_LT(transactions, kKeys / 4) << "200 queued advances took " << transactions;
}

// Whoever sees an answer sees its write counted: GET /metrics right after
// a response counts that response's check-and-advance.
TEST_F(EtcdStoreTest, AWriteIsCountedBeforeItIsAnswered) {
  auto store = Open();
  struct Step {
    uint64_t token;
    uint64_t requests;  // counted when its answer comes
    uint64_t writes;
  };
  // The last one is stale: refused, nothing written.
  for (const Step& step : {Step{5, 1, 1}, Step{6, 2, 2}, Step{4, 3, 2}}) {
    std::promise<StoreCounters> seen;
    store->Advance("/objects/counted", step.token, [&](const Status& s, Fence) {
      EXPECT_TRUE(s.ok()) << s.ToString();
      seen.set_value(store->Counters().value());
    });
    const StoreCounters at_answer = seen.get_future().get();
    EXPECT_EQ(at_answer.requests, step.requests) << "token " << step.token;
    EXPECT_EQ(at_answer.writes, step.writes) << "token " << step.token;
  }
}

TEST_F(EtcdStoreTest, ACallQueuedTwiceForOneKeyIsDecidedInOrder) {
  auto store = Open();
  std::promise<Fence> first;
  std::promise<Fence> second;
  store->Advance("/objects/o", 10, [&](const Status&, Fence f) { first.set_value(f); });
  store->Advance("/objects/o", 9, [&](const Status&, Fence f) { second.set_value(f); });
  EXPECT_TRUE(first.get_future().get().accepted);
  Fence late = second.get_future().get();
  EXPECT_FALSE(late.accepted);
  EXPECT_EQ(late.current, 10u);
}

TEST_F(EtcdStoreTest, SeveralKeysAreAllOrNothing) {
  auto store = Open();
  ASSERT_TRUE(AdvanceSync(*store, "/b", 50).fence.accepted);
  auto [s, refused] = AdvanceAllSync(*store, {{"/a", 40}, {"/b", 40}});
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_FALSE(refused.accepted);
  EXPECT_EQ(refused.stale, 1u);
  EXPECT_EQ(refused.current, (std::vector<uint64_t>{0, 50}));
  EXPECT_EQ(GetSync(*store, "/a").second, std::nullopt) << "nothing of a refused batch is stored";
  auto [s2, ok] = AdvanceAllSync(*store, {{"/a", 60}, {"/b", 60}});
  ASSERT_TRUE(s2.ok());
  EXPECT_TRUE(ok.accepted);
  EXPECT_EQ(ok.current, (std::vector<uint64_t>{60, 60}));
  EXPECT_EQ(GetSync(*store, "/b").second, 60u);
}

TEST_F(EtcdStoreTest, AValueThatIsNotATokenIsCorruption) {
  auto store = Open();
  const std::string key = prefix_ + "t/damaged";
  nlohmann::json put = {{"key", EtcdClient::Base64(key)}, {"value", EtcdClient::Base64("12")}};
  cluster_->Post(0, "/v3/kv/put", put.dump());
  EXPECT_EQ(AdvanceSync(*store, "damaged", 5).status.code(), Status::Code::kCorruption);
  EXPECT_EQ(GetSync(*store, "damaged").first.code(), Status::Code::kCorruption);
}

// Idempotency records: the contract every engine keeps (reserve exactly
// once, finish and release by the owner, expiry by the caller's clock),
// across two stores as across two replicas.
IdempotencyRecord Reserved(uint64_t owner, int64_t now) {
  IdempotencyRecord r;
  r.owner = owner;
  r.created_ms = now;
  r.expires_ms = now + 60'000;
  r.head_digest = std::string(kDigestBytes, 'h');
  return r;
}

IdempotencyRecord Finished(uint64_t owner, int64_t now) {
  IdempotencyRecord r = Reserved(owner, now);
  r.state = IdempotencyRecord::State::kFinished;
  r.expires_ms = now + 3'600'000;
  r.body_digest = std::string(kDigestBytes, 'b');
  r.response.status = 201;
  r.response.headers = {{"Content-Type", "text/plain"}};
  r.response.body = "paid";
  r.response.body_bytes = 4;
  return r;
}

std::pair<Status, Reservation> ReserveSync(IdempotencyStore& s, const std::string& key,
                                           IdempotencyRecord r) {
  std::promise<std::pair<Status, Reservation>> p;
  s.ReserveKey(key, std::move(r), [&](const Status& st, Reservation a) {
    p.set_value({st, std::move(a)});
  });
  return p.get_future().get();
}

std::pair<Status, bool> ChangeSync(IdempotencyStore& s, bool finish, const std::string& key,
                                   uint64_t owner, int64_t now) {
  std::promise<std::pair<Status, bool>> p;
  auto done = [&](const Status& st, bool applied) { p.set_value({st, applied}); };
  if (finish) {
    s.FinishKey(key, Finished(owner, now), now, done);
  } else {
    s.ReleaseKey(key, owner, done);
  }
  return p.get_future().get();
}

std::optional<IdempotencyRecord> LookupSync(IdempotencyStore& s, const std::string& key,
                                            int64_t now) {
  std::promise<std::optional<IdempotencyRecord>> p;
  s.LookupKey(key, now, [&](const Status& st, std::optional<IdempotencyRecord> r) {
    EXPECT_TRUE(st.ok()) << st.ToString();
    p.set_value(std::move(r));
  });
  return p.get_future().get();
}

constexpr int64_t kNow = 1'780'000'000'000;

TEST_F(EtcdStoreTest, RecordsAreReservedOnceAcrossReplicas) {
  auto a = Open();
  auto b = Open();
  IdempotencyStore& ra = *a->Idempotency();
  IdempotencyStore& rb = *b->Idempotency();
  // Both replicas reserve at once: exactly one wins.
  std::promise<std::pair<Status, Reservation>> pa;
  std::promise<std::pair<Status, Reservation>> pb;
  ra.ReserveKey("k", Reserved(1, kNow), [&](const Status& s, Reservation r) {
    pa.set_value({s, std::move(r)});
  });
  rb.ReserveKey("k", Reserved(2, kNow), [&](const Status& s, Reservation r) {
    pb.set_value({s, std::move(r)});
  });
  auto [sa, resa] = pa.get_future().get();
  auto [sb, resb] = pb.get_future().get();
  ASSERT_TRUE(sa.ok() && sb.ok()) << sa.ToString() << sb.ToString();
  ASSERT_NE(resa.reserved, resb.reserved) << "exactly one of two reserves wins";
  const uint64_t winner = resa.reserved ? 1 : 2;
  const Reservation& lost = resa.reserved ? resb : resa;
  ASSERT_TRUE(lost.existing.has_value());
  EXPECT_EQ(lost.existing->owner, winner);
  // Only the owner finishes; then both replicas see the response.
  EXPECT_FALSE(ChangeSync(rb, true, "k", winner == 1 ? 2 : 1, kNow + 5).second);
  EXPECT_TRUE(ChangeSync(ra, true, "k", winner, kNow + 5).second);
  EXPECT_EQ(LookupSync(rb, "k", kNow + 10), Finished(winner, kNow + 5));
  EXPECT_EQ(LookupSync(ra, "k", kNow + 3'600'000 + 5), std::nullopt) << "expired by the clock";
  auto [s, again] = ReserveSync(rb, "k", Reserved(3, kNow + 10));
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE(again.reserved);

  // Many keys, each reserved through both at once: never two winners.
  constexpr int kKeys = 100;
  std::atomic<int> winners[kKeys] = {};
  std::atomic<int> pending{2 * kKeys};
  std::atomic<int> errors{0};
  std::promise<void> done;
  for (int i = 0; i < kKeys; ++i) {
    for (IdempotencyStore* r : {&ra, &rb}) {
      r->ReserveKey("many/" + std::to_string(i), Reserved(r == &ra ? 1 : 2, kNow),
                    [&, i](const Status& st, Reservation res) {
                      if (!st.ok()) errors.fetch_add(1);
                      if (res.reserved) winners[i].fetch_add(1);
                      if (pending.fetch_sub(1) == 1) done.set_value();
                    });
    }
  }
  done.get_future().wait();
  EXPECT_EQ(errors.load(), 0);
  for (int i = 0; i < kKeys; ++i) EXPECT_EQ(winners[i].load(), 1) << "key many/" << i;
}

TEST_F(EtcdStoreTest, ReleaseIsTheOwnersAndAnAbandonedReservationRunsOut) {
  auto store = Open();
  IdempotencyStore& r = *store->Idempotency();
  ASSERT_TRUE(ReserveSync(r, "k", Reserved(1, kNow)).second.reserved);
  EXPECT_FALSE(ChangeSync(r, false, "k", 2, kNow).second) << "not the owner";
  EXPECT_TRUE(ChangeSync(r, false, "k", 1, kNow).second);
  EXPECT_EQ(LookupSync(r, "k", kNow), std::nullopt);
  ASSERT_TRUE(ReserveSync(r, "k", Reserved(3, kNow)).second.reserved);
  EXPECT_FALSE(ReserveSync(r, "k", Reserved(4, kNow + 59'999)).second.reserved);
  auto [s, taken] = ReserveSync(r, "k", Reserved(4, kNow + 60'000));
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(taken.reserved);
  EXPECT_TRUE(taken.replaced_expired);
}

TEST_F(EtcdStoreTest, ARenewedReservationHoldsItsKeyAtEveryReplica) {
  auto a = Open();
  auto b = Open();
  IdempotencyStore& ra = *a->Idempotency();
  IdempotencyStore& rb = *b->Idempotency();
  ASSERT_TRUE(ReserveSync(ra, "k", Reserved(1, kNow)).second.reserved);
  std::promise<std::pair<Status, bool>> p;
  ra.RenewKey("k", 1, kNow + 180'000, kNow + 50'000,
              [&](const Status& st, bool applied) { p.set_value({st, applied}); });
  auto [s, applied] = p.get_future().get();
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(applied);
  auto [s2, held] = ReserveSync(rb, "k", Reserved(2, kNow + 120'000));
  ASSERT_TRUE(s2.ok());
  EXPECT_FALSE(held.reserved) << "renewed past its first in_flight_timeout";
  EXPECT_TRUE(ReserveSync(rb, "k", Reserved(2, kNow + 180'000)).second.reserved);
}

TEST_F(EtcdStoreTest, ADamagedRecordIsCorruption) {
  auto store = Open();
  const std::string key = prefix_ + "i/damaged";
  nlohmann::json put = {{"key", EtcdClient::Base64(key)}, {"value", EtcdClient::Base64("xx")}};
  cluster_->Post(0, "/v3/kv/put", put.dump());
  auto [s, r] = ReserveSync(*store->Idempotency(), "damaged", Reserved(1, kNow));
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  EXPECT_FALSE(r.reserved);
}

// Nothing answers: every call fails closed within the client's deadline,
// and Health says so.
TEST(EtcdStoreDown, FailsClosedWhenEtcdIsGone) {
  std::vector<uint16_t> ports = fencegate::testing::etcd_process_detail::FreePorts(1);
  EtcdClientOptions options;
  options.endpoints = {"http://127.0.0.1:" + std::to_string(ports[0])};
  options.request_timeout = std::chrono::milliseconds(200);
  std::unique_ptr<EtcdClient> client;
  ASSERT_TRUE(EtcdClient::Open(options, &client).ok());
  struct Plain : EtcdTransport {
    explicit Plain(std::unique_ptr<EtcdClient> c) : client(std::move(c)) {}
    Status Call(std::string_view path, const nlohmann::json& request, nlohmann::json* response,
                bool retry, Deadline deadline) override {
      return client->Call(path, request, response, retry, nullptr, deadline);
    }
    std::unique_ptr<EtcdClient> client;
  };
  EtcdStore store(std::make_unique<Plain>(std::move(client)), EtcdStoreOptions{});
  Answer a = AdvanceSync(store, "/objects/a", 1);
  EXPECT_EQ(a.status.code(), Status::Code::kUnavailable) << a.status.ToString();
  EXPECT_FALSE(a.fence.accepted);
  EXPECT_EQ(store.Health().code(), Status::Code::kUnavailable);
  EXPECT_TRUE(store.Close().ok());
  EXPECT_EQ(AdvanceSync(store, "/objects/a", 1).status.code(), Status::Code::kUnavailable);
}

// etcd that never answers, as a cluster without a quorum: each call ends
// at the deadline the store gives it (plus `late`, as a member whose
// answer comes just after it), and fails. It keeps the deadlines.
class SilentTransport : public EtcdTransport {
 public:
  explicit SilentTransport(std::chrono::milliseconds late) : late_(late) {}
  Status Call(std::string_view, const nlohmann::json&, nlohmann::json*, bool,
              Deadline deadline) override {
    {
      std::lock_guard lock(mu_);
      deadlines_.push_back(deadline);
    }
    // The network call the test stands for: blocked until its deadline.
    std::this_thread::sleep_until(deadline + late_);
    return Status::Unavailable("no quorum");
  }
  std::vector<Deadline> deadlines() {
    std::lock_guard lock(mu_);
    return deadlines_;
  }

 private:
  const std::chrono::milliseconds late_;
  std::mutex mu_;
  std::vector<Deadline> deadlines_;
};

// Two writes of different keys, one transaction each: the second waits on
// the lane while the first's call runs to its deadline.
std::vector<Answer> TwoWritesQueued(EtcdStore& store, std::chrono::steady_clock::time_point* before,
                                    std::chrono::steady_clock::time_point* after) {
  std::promise<Answer> first;
  std::promise<Answer> second;
  *before = std::chrono::steady_clock::now();
  store.Advance("/objects/a", 1, [&](const Status& s, Fence f) { first.set_value({s, f}); });
  store.Advance("/objects/b", 1, [&](const Status& s, Fence f) { second.set_value({s, f}); });
  *after = std::chrono::steady_clock::now();
  return {first.get_future().get(), second.get_future().get()};
}

// One transaction per write, 200 ms for each decision, on SilentTransport.
class EtcdStoreDecisionTimeout : public ::testing::Test {
 protected:
  static constexpr std::chrono::milliseconds kTimeout{200};
  void Open(std::chrono::milliseconds late) {
    EtcdStoreOptions options;
    options.max_batch = 1;
    options.decision_timeout = kTimeout;
    auto transport = std::make_unique<SilentTransport>(late);
    silent_ = transport.get();
    store_ = std::make_unique<EtcdStore>(std::move(transport), options);
  }
  void TearDown() override {
    if (store_ != nullptr) EXPECT_TRUE(store_->Close().ok());
  }
  SilentTransport* silent_ = nullptr;
  std::unique_ptr<EtcdStore> store_;
};

TEST_F(EtcdStoreDecisionTimeout, EveryCallOfAWriteEndsWithinItsDecisionTimeout) {
  Open(std::chrono::milliseconds(0));
  std::chrono::steady_clock::time_point before;
  std::chrono::steady_clock::time_point after;
  for (const Answer& a : TwoWritesQueued(*store_, &before, &after)) {
    EXPECT_EQ(a.status.code(), Status::Code::kUnavailable) << a.status.ToString();
  }
  // Each call was given the deadline of its write, counted from when the
  // write was queued: the second's does not start when the first's ends.
  const std::vector<SilentTransport::Deadline> deadlines = silent_->deadlines();
  ASSERT_FALSE(deadlines.empty());
  for (SilentTransport::Deadline d : deadlines) {
    EXPECT_GE(d, before + kTimeout);
    EXPECT_LE(d, after + kTimeout);
  }
}

TEST_F(EtcdStoreDecisionTimeout, AWritePastItsDecisionTimeoutIsNotTried) {
  // The first call ends a second after its deadline: the second write's,
  // a moment after the first's, has passed by then however slow the
  // machine is between the two writes.
  Open(std::chrono::milliseconds(1000));
  std::chrono::steady_clock::time_point before;
  std::chrono::steady_clock::time_point after;
  std::vector<Answer> answers = TwoWritesQueued(*store_, &before, &after);
  EXPECT_EQ(answers[0].status.code(), Status::Code::kUnavailable);
  // The first call ended after both deadlines: the second write is
  // answered at its turn, and etcd never sees it.
  EXPECT_EQ(answers[1].status.code(), Status::Code::kUnavailable);
  EXPECT_NE(answers[1].status.ToString().find("storage.etcd.decision_timeout (200 ms)"),
            std::string::npos)
      << answers[1].status.ToString();
  EXPECT_EQ(silent_->deadlines().size(), 1u);
}

}  // namespace
}  // namespace fencegate::storage
