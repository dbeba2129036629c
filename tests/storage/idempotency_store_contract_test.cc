// The IdempotencyStore contract (storage/idempotency_store.h), one suite
// over every engine that keeps idempotency records: reserve exactly once,
// finish and release only by the owner, expiry judged by the caller's
// clock, damage answered as Corruption.

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include <rocksdb/db.h>

#include "storage/fault_injecting_store.h"
#include "storage/idempotency_store.h"
#include "storage/memory_store.h"
#include "storage/rocksdb_options.h"
#include "storage/rocksdb_store.h"
#include "storage/token_store.h"
#include "tests/storage/test_util.h"

namespace fencegate::storage {
namespace {

using State = IdempotencyRecord::State;

constexpr int64_t kNow = 1'780'000'000'000;
constexpr int64_t kInFlight = 60'000;
constexpr int64_t kWindow = 86'400'000;

using testing::OpenRocks;
using testing::TempDir;

struct Engine {
  std::string name;
  std::function<std::unique_ptr<TokenStore>(const std::string& dir)> open;
};
void PrintTo(const Engine& engine, std::ostream* os) { *os << engine.name; }

std::vector<Engine> Engines() {
  return {
      {"Memory", [](const std::string&) { return std::make_unique<MemoryStore>(); }},
      {"MemoryOnCaller",
       [](const std::string&) {
         return std::make_unique<MemoryStore>(MemoryStoreOptions{.answer_on_caller = true});
       }},
      {"RocksDbSync",
       [](const std::string& dir) { return OpenRocks(dir + "/db", Durability::kSync); }},
      {"RocksDbAsync",
       [](const std::string& dir) { return OpenRocks(dir + "/db", Durability::kAsync); }},
      // The fault-injecting wrapper without faults: the base's contract.
      {"FaultInjectingOverRocksDb",
       [](const std::string& dir) {
         return std::make_unique<FaultInjectingStore>(OpenRocks(dir + "/db", Durability::kSync));
       }},
  };
}

IdempotencyRecord Reserved(uint64_t owner, int64_t now = kNow) {
  IdempotencyRecord r;
  r.state = State::kReserved;
  r.owner = owner;
  r.created_ms = now;
  r.expires_ms = now + kInFlight;
  r.head_digest = std::string(kDigestBytes, 'h');
  return r;
}

IdempotencyRecord Finished(uint64_t owner, int64_t now = kNow) {
  IdempotencyRecord r = Reserved(owner, now);
  r.state = State::kFinished;
  r.expires_ms = now + kWindow;
  r.body_digest = std::string(kDigestBytes, 'b');
  r.response.status = 201;
  r.response.headers = {{"Content-Type", "text/plain"}};
  r.response.body = "paid";
  r.response.body_bytes = 4;
  return r;
}

class IdempotencyStoreContract : public ::testing::TestWithParam<Engine> {
 protected:
  void SetUp() override {
    store_ = GetParam().open(dir_.path());
    ASSERT_NE(store_, nullptr);
    records_ = store_->Idempotency();
    ASSERT_NE(records_, nullptr);
  }

  std::pair<Status, Reservation> Reserve(const std::string& key, IdempotencyRecord r) {
    std::promise<std::pair<Status, Reservation>> p;
    records_->ReserveKey(key, std::move(r), [&](const Status& s, Reservation a) {
      p.set_value({s, std::move(a)});
    });
    return p.get_future().get();
  }
  std::pair<Status, bool> Finish(const std::string& key, IdempotencyRecord r, int64_t now) {
    std::promise<std::pair<Status, bool>> p;
    records_->FinishKey(key, std::move(r), now,
                        [&](const Status& s, bool applied) { p.set_value({s, applied}); });
    return p.get_future().get();
  }
  std::pair<Status, bool> Release(const std::string& key, uint64_t owner) {
    std::promise<std::pair<Status, bool>> p;
    records_->ReleaseKey(key, owner,
                         [&](const Status& s, bool applied) { p.set_value({s, applied}); });
    return p.get_future().get();
  }
  std::pair<Status, bool> Renew(const std::string& key, uint64_t owner, int64_t expires_ms) {
    std::promise<std::pair<Status, bool>> p;
    records_->RenewKey(key, owner, expires_ms, kNow,
                       [&](const Status& s, bool applied) { p.set_value({s, applied}); });
    return p.get_future().get();
  }
  std::pair<Status, std::optional<IdempotencyRecord>> Lookup(const std::string& key,
                                                             int64_t now) {
    std::promise<std::pair<Status, std::optional<IdempotencyRecord>>> p;
    records_->LookupKey(key, now, [&](const Status& s, std::optional<IdempotencyRecord> r) {
      p.set_value({s, std::move(r)});
    });
    return p.get_future().get();
  }

  TempDir dir_;
  std::unique_ptr<TokenStore> store_;  // after dir_: closed before it goes
  IdempotencyStore* records_ = nullptr;
};

TEST_P(IdempotencyStoreContract, TheFirstReservationWinsAndTheSecondSeesIt) {
  auto [s1, a1] = Reserve("k", Reserved(1));
  ASSERT_TRUE(s1.ok()) << s1.ToString();
  EXPECT_TRUE(a1.reserved);
  EXPECT_FALSE(a1.existing.has_value());
  EXPECT_FALSE(a1.replaced_expired);
  auto [s2, a2] = Reserve("k", Reserved(2, kNow + 10));
  ASSERT_TRUE(s2.ok());
  EXPECT_FALSE(a2.reserved);
  ASSERT_TRUE(a2.existing.has_value());
  EXPECT_EQ(*a2.existing, Reserved(1));
}

TEST_P(IdempotencyStoreContract, AFinishedRecordIsWhatARepeatSees) {
  ASSERT_TRUE(Reserve("k", Reserved(1)).second.reserved);
  auto [fs, applied] = Finish("k", Finished(1), kNow + 5);
  ASSERT_TRUE(fs.ok()) << fs.ToString();
  EXPECT_TRUE(applied);
  auto [s, a] = Reserve("k", Reserved(2, kNow + kInFlight + 1));
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE(a.reserved) << "the window outlives the in-flight timeout";
  ASSERT_TRUE(a.existing.has_value());
  EXPECT_EQ(*a.existing, Finished(1));
  auto [ls, rec] = Lookup("k", kNow + kWindow - 1);
  ASSERT_TRUE(ls.ok());
  EXPECT_EQ(rec, Finished(1));
}

TEST_P(IdempotencyStoreContract, AfterTheWindowTheKeyRunsAgain) {
  ASSERT_TRUE(Reserve("k", Reserved(1)).second.reserved);
  ASSERT_TRUE(Finish("k", Finished(1), kNow).second);
  EXPECT_FALSE(Lookup("k", kNow + kWindow).second.has_value());
  auto [s, again] = Reserve("k", Reserved(2, kNow + kWindow));
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(again.reserved);
  EXPECT_TRUE(again.replaced_expired) << "the expired result was still stored: counted";
}

TEST_P(IdempotencyStoreContract, AnAbandonedReservationIsReleasedByItsTimeout) {
  ASSERT_TRUE(Reserve("k", Reserved(1)).second.reserved);
  EXPECT_FALSE(Reserve("k", Reserved(2, kNow + kInFlight - 1)).second.reserved);
  auto [rs, taken] = Reserve("k", Reserved(2, kNow + kInFlight));
  ASSERT_TRUE(rs.ok());
  EXPECT_TRUE(taken.reserved);
  EXPECT_TRUE(taken.replaced_expired);
  // The first holder, finishing late, does not overwrite the second's
  // live reservation.
  auto [s, applied] = Finish("k", Finished(1), kNow + kInFlight + 1);
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE(applied);
  EXPECT_EQ(Lookup("k", kNow + kInFlight + 1).second, Reserved(2, kNow + kInFlight));
}

TEST_P(IdempotencyStoreContract, AResultIsKeptEvenAfterItsReservationRanOut) {
  ASSERT_TRUE(Reserve("k", Reserved(1)).second.reserved);
  auto [s, applied] = Finish("k", Finished(1, kNow + kInFlight + 5), kNow + kInFlight + 5);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(applied) << "the request ran: a retry must replay it, not run it again";
}

TEST_P(IdempotencyStoreContract, ARenewedReservationOutlivesItsTimeout) {
  ASSERT_TRUE(Reserve("k", Reserved(1)).second.reserved);
  auto [s, applied] = Renew("k", 1, kNow + 3 * kInFlight);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(applied);
  auto [rs, held] = Reserve("k", Reserved(2, kNow + 2 * kInFlight));
  ASSERT_TRUE(rs.ok());
  EXPECT_FALSE(held.reserved) << "the request still lives: its key is not taken";
  ASSERT_TRUE(held.existing.has_value());
  EXPECT_EQ(held.existing->owner, 1u);
  EXPECT_TRUE(Reserve("k", Reserved(2, kNow + 3 * kInFlight)).second.reserved);
}

TEST_P(IdempotencyStoreContract, OnlyTheOwnerRenewsNeverShorterAndNeverAFinishedRecord) {
  ASSERT_TRUE(Reserve("k", Reserved(1)).second.reserved);
  EXPECT_FALSE(Renew("k", 2, kNow + 3 * kInFlight).second);
  EXPECT_FALSE(Renew("other", 1, kNow + 3 * kInFlight).second);
  EXPECT_TRUE(Renew("k", 1, kNow + 1).second);
  EXPECT_FALSE(Reserve("k", Reserved(2, kNow + kInFlight - 1)).second.reserved)
      << "a renewal never shortens a reservation";
  ASSERT_TRUE(Finish("k", Finished(1), kNow + 5).second);
  EXPECT_FALSE(Renew("k", 1, kNow + kWindow + 1).second);
  EXPECT_EQ(Lookup("k", kNow + 5).second, Finished(1));
}

TEST_P(IdempotencyStoreContract, OnlyTheOwnerReleases) {
  ASSERT_TRUE(Reserve("k", Reserved(1)).second.reserved);
  EXPECT_FALSE(Release("k", 2).second);
  EXPECT_TRUE(Lookup("k", kNow).second.has_value());
  EXPECT_TRUE(Release("k", 1).second);
  EXPECT_FALSE(Lookup("k", kNow).second.has_value());
  EXPECT_TRUE(Reserve("k", Reserved(3)).second.reserved);
}

TEST_P(IdempotencyStoreContract, AFinishedRecordIsNeverReleased) {
  ASSERT_TRUE(Reserve("k", Reserved(1)).second.reserved);
  ASSERT_TRUE(Finish("k", Finished(1), kNow).second);
  EXPECT_FALSE(Release("k", 1).second);
  EXPECT_EQ(Lookup("k", kNow).second, Finished(1));
}

TEST_P(IdempotencyStoreContract, KeysAreIndependent) {
  ASSERT_TRUE(Reserve("a", Reserved(1)).second.reserved);
  EXPECT_TRUE(Reserve("b", Reserved(2)).second.reserved);
  EXPECT_TRUE(Reserve(std::string("a\0", 2), Reserved(3)).second.reserved);
}

TEST_P(IdempotencyStoreContract, BadArgumentsAreRefusedAndNothingIsStored) {
  EXPECT_EQ(Reserve("", Reserved(1)).first.code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(Reserve(std::string(kMaxRecordKeyBytes + 1, 'k'), Reserved(1)).first.code(),
            Status::Code::kInvalidArgument);
  EXPECT_TRUE(Reserve(std::string(kMaxRecordKeyBytes, 'k'), Reserved(1)).second.reserved);
  EXPECT_EQ(Reserve("k", Finished(1)).first.code(), Status::Code::kInvalidArgument);
  IdempotencyRecord short_digest = Reserved(1);
  short_digest.head_digest = "abc";
  EXPECT_EQ(Reserve("k", short_digest).first.code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(Finish("k", Reserved(1), kNow).first.code(), Status::Code::kInvalidArgument);
  IdempotencyRecord split = Finished(1);
  split.response.headers.emplace_back("X", "a\r\nb: c");
  EXPECT_EQ(Finish("k", split, kNow).first.code(), Status::Code::kInvalidArgument);
  EXPECT_FALSE(Lookup("k", kNow).second.has_value());
}

TEST_P(IdempotencyStoreContract, OfManyConcurrentReservationsExactlyOneWins) {
  constexpr int kThreads = 8;
  constexpr int kKeys = 200;
  std::atomic<int> won{0};
  std::atomic<int> lost{0};
  std::atomic<int> failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int k = 0; k < kKeys; ++k) {
        auto [s, a] = Reserve("key-" + std::to_string(k), Reserved(100 + t));
        if (!s.ok()) {
          ++failed;
        } else if (a.reserved) {
          ++won;
        } else {
          ++lost;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(won.load(), kKeys);
  EXPECT_EQ(lost.load(), kKeys * (kThreads - 1));
}

TEST_P(IdempotencyStoreContract, AfterCloseEveryCallIsUnavailable) {
  ASSERT_TRUE(store_->Close().ok());
  EXPECT_EQ(Reserve("k", Reserved(1)).first.code(), Status::Code::kUnavailable);
  EXPECT_EQ(Finish("k", Finished(1), kNow).first.code(), Status::Code::kUnavailable);
  EXPECT_EQ(Release("k", 1).first.code(), Status::Code::kUnavailable);
  EXPECT_EQ(Lookup("k", kNow).first.code(), Status::Code::kUnavailable);
}

INSTANTIATE_TEST_SUITE_P(Contract, IdempotencyStoreContract, ::testing::ValuesIn(Engines()),
                         [](const auto& info) { return info.param.name; });

// Injected faults reach the records as they reach tokens: changes fail as
// writes, lookups as reads, and nothing is stored by a failed change.
TEST(FaultInjectingRecords, WritesAndReadsFailAsInjected) {
  FaultInjectingStore store(std::make_unique<MemoryStore>());
  IdempotencyStore* records = store.Idempotency();
  ASSERT_EQ(records, &store);
  auto reserve = [&](uint64_t owner) {
    std::promise<std::pair<Status, Reservation>> p;
    records->ReserveKey("k", Reserved(owner),
                        [&](const Status& s, Reservation a) { p.set_value({s, std::move(a)}); });
    return p.get_future().get();
  };
  auto lookup = [&] {
    std::promise<std::pair<Status, std::optional<IdempotencyRecord>>> p;
    records->LookupKey("k", kNow, [&](const Status& s, std::optional<IdempotencyRecord> r) {
      p.set_value({s, std::move(r)});
    });
    return p.get_future().get();
  };
  store.SetFaults(FaultSpec{.fail_writes = true});
  auto [failed, none] = reserve(1);
  EXPECT_TRUE(failed.code() == Status::Code::kIoError) << failed.ToString();
  EXPECT_FALSE(none.reserved);
  store.SetFaults(FaultSpec{});
  EXPECT_FALSE(lookup().second.has_value()) << "a failed reserve stored nothing";
  ASSERT_TRUE(reserve(2).second.reserved);
  store.SetFaults(FaultSpec{.fail_reads = true, .delay = std::chrono::milliseconds(5)});
  EXPECT_TRUE(lookup().first.code() == Status::Code::kIoError);
  std::promise<Status> finish;
  store.SetFaults(FaultSpec{.fail_writes = true});
  records->FinishKey("k", Finished(2), kNow,
                     [&](const Status& s, bool) { finish.set_value(s); });
  EXPECT_TRUE(finish.get_future().get().code() == Status::Code::kIoError);
  std::promise<Status> release;
  records->ReleaseKey("k", 2, [&](const Status& s, bool) { release.set_value(s); });
  EXPECT_TRUE(release.get_future().get().code() == Status::Code::kIoError);
  store.SetFaults(FaultSpec{});
  EXPECT_EQ(lookup().second, Reserved(2)) << "failed changes changed nothing";
}

TEST(FaultInjectingRecords, NoRecordsWithoutABaseThatKeepsThem) {
  struct Tokens : MemoryStore {
    IdempotencyStore* Idempotency() override { return nullptr; }
  };
  FaultInjectingStore store(std::make_unique<Tokens>());
  EXPECT_EQ(store.Idempotency(), nullptr);
}

// The memory engine's sweep, and a damaged record answered as Corruption
// by every call that reads it (the decisions every engine shares).
TEST(MemoryStoreRecords, TheSweepRemovesOnlyWhatIsNotLive) {
  MemoryStore store(MemoryStoreOptions{.answer_on_caller = true});
  store.ReserveKey("r", Reserved(1), [](const Status&, Reservation) {});
  store.ReserveKey("f", Reserved(2), [](const Status&, Reservation) {});
  store.FinishKey("f", Finished(2), kNow, [](const Status&, bool) {});
  EXPECT_EQ(store.RecordCount(), 2u);
  EXPECT_EQ(store.SweepRecords(kNow + kInFlight - 1), 0u);
  EXPECT_EQ(store.SweepRecords(kNow + kInFlight), 1u);
  EXPECT_EQ(store.RecordCount(), 1u);
  EXPECT_EQ(store.SweepRecords(kNow + kWindow), 1u);
  EXPECT_EQ(store.RecordCount(), 0u);
}

TEST(RecordDecisions, ADamagedRecordIsCorruptionAndNothingChanges) {
  const std::optional<std::string> damaged = std::string("\x01\x07", 2);
  Reservation answer;
  RecordDecision change;
  EXPECT_EQ(DecideReserve(damaged, Reserved(1), &answer, &change).code(),
            Status::Code::kCorruption);
  EXPECT_FALSE(change.apply);
  EXPECT_EQ(DecideFinish(damaged, Finished(1), kNow, &change).code(), Status::Code::kCorruption);
  EXPECT_FALSE(change.apply);
  EXPECT_EQ(DecideRelease(damaged, 1, &change).code(), Status::Code::kCorruption);
  EXPECT_FALSE(change.apply);
  std::optional<IdempotencyRecord> rec;
  EXPECT_EQ(DecideLookup(damaged, kNow, &rec).code(), Status::Code::kCorruption);
}

}  // namespace
}  // namespace fencegate::storage
