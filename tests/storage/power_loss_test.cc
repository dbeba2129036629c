// RocksDbStore across simulated power losses (PowerLossFs under RocksDB):
// several threads advance keys while the power goes at a random point. No
// token the store acknowledged (under sync), or that was durable at the
// last sync point (under async), may be gone after a loss, and a loss that
// leaves every synced byte intact and only drops, cuts short or zeroes the
// rest must leave a store that opens. Tokens only ever come from the test,
// so a stored token the test never sent for that key would be damage read
// as data.

#include <filesystem>
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "tests/storage/power_loss_harness.h"

namespace fencegate::storage::testing {
namespace {

using PowerLossTest = PowerLossHarness;

// The modes after which the store must open: every byte a sync covered is
// intact, the rest is gone or cut short.
LossMode CleanCutOf(int round) {
  return round % 2 == 0 ? LossMode::kDropUnsynced : LossMode::kKeepRandomPrefix;
}

// Under sync every answered value is in the fsynced WAL before the answer:
// no loss may take one.
TEST_F(PowerLossTest, SyncKeepsEveryAcknowledgedToken) {
  ASSERT_TRUE(Open(Durability::kSync).ok());
  for (int round = 0; round < Rounds(40); ++round) {
    StartWriters();
    ASSERT_TRUE(WaitForAnswers(OpsBeforeLoss())) << "round " << round;
    const LossMode mode = CleanCutOf(round);
    LossReport r = LosePower(mode);
    history_.TakeAnswers(/*durable=*/true);
    const std::string when = Describe(round, mode, r);
    Status s = Open(Durability::kSync);
    ASSERT_TRUE(s.ok()) << when << ": " << s.ToString();
    // What the disk holds after a loss is durable: a floor from now on.
    for (const auto& [key, value] : CheckStore(when)) history_.RaiseFloor(key, value);
    if (HasFailure()) return;
  }
  PrintSummary("");
}

// Under async a loss may take acknowledged tokens, but never what was
// durable at the last sync point (a clean Close syncs the WAL), and never
// leaves the store unable to open.
TEST_F(PowerLossTest, AsyncNeverGoesBelowTheLastSyncPoint) {
  ASSERT_TRUE(Open(Durability::kAsync).ok());
  int sync_points = 0;
  for (int round = 0; round < Rounds(40); ++round) {
    if (rng_() % 2 == 0) {
      // A sync point between losses: a clean stop, after which the power
      // may go at once (the reopen alone would make everything durable too:
      // RocksDB flushes what it replays).
      StartWriters();
      ASSERT_TRUE(WaitForAnswers(OpsBeforeLoss())) << "round " << round;
      StopWriters();
      Status closed = store_->Close();
      ASSERT_TRUE(closed.ok()) << closed.ToString();
      history_.TakeAnswers(/*durable=*/true);
      std::string when = "seed " + std::to_string(seed_) + ", round " + std::to_string(round) +
                         ", after a clean close";
      if (rng_() % 2 == 0) {
        const LossMode mode = CleanCutOf(round + 1);
        when = Describe(round, mode, LosePower(mode)) + ", right after a clean close";
      }
      Status s = Open(Durability::kAsync);
      ASSERT_TRUE(s.ok()) << when << ": " << s.ToString();
      CheckStore(when);
      if (HasFailure()) return;
      ++sync_points;
    }
    StartWriters();
    ASSERT_TRUE(WaitForAnswers(OpsBeforeLoss())) << "round " << round;
    const LossMode mode = CleanCutOf(round);
    LossReport r = LosePower(mode);
    history_.TakeAnswers(/*durable=*/false);
    const std::string when = Describe(round, mode, r);
    Status s = Open(Durability::kAsync);
    ASSERT_TRUE(s.ok()) << when << ": " << s.ToString();
    for (const auto& [key, value] : CheckStore(when)) history_.RaiseFloor(key, value);
    if (HasFailure()) return;
  }
  PrintSummary(", " + std::to_string(sync_points) + " sync points");
}

// A torn last page (a file's size reached the disk, the end of its data
// did not and reads as zeros) cuts into a record whose sync had not
// returned: a WAL record nobody was answered for, or a MANIFEST edit of a
// flush or WAL switch that had not finished. RocksDB reads it as a
// checksum mismatch and would refuse it; Open cuts such a torn tail off
// first (log_tail.h), so the store opens, with every acknowledged token.
TEST_F(PowerLossTest, SyncTornPageOpensAndKeepsEveryAcknowledgedToken) {
  int torn_files = 0;
  ASSERT_TRUE(Open(Durability::kSync).ok());
  for (int round = 0; round < Rounds(24); ++round) {
    StartWriters();
    ASSERT_TRUE(WaitForAnswers(OpsBeforeLoss())) << "round " << round;
    LossReport r = LosePower(LossMode::kTearLastPage);
    history_.TakeAnswers(/*durable=*/true);
    torn_files += static_cast<int>(r.torn.size());
    std::string when = Describe(round, LossMode::kTearLastPage, r);
    for (const LossReport::Torn& t : r.torn) {
      when += ", " + std::filesystem::path(t.path).filename().string() + " zeros from " +
              std::to_string(t.zeros_from);
    }
    Status s = Open(Durability::kSync);
    ASSERT_TRUE(s.ok()) << when << ": " << s.ToString();
    for (const auto& [key, value] : CheckStore(when)) history_.RaiseFloor(key, value);
    if (HasFailure()) return;
  }
  PrintSummary(" tearing the last page of " + std::to_string(torn_files) +
               " files, every loss opened");
}

}  // namespace
}  // namespace fencegate::storage::testing
