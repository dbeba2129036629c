// The free-space check before each token-store write, without a statvfs per
// write: when it asks the file system and when it may skip asking.
#include <chrono>
#include <cstdint>
#include <string>

#include <gtest/gtest.h>

#include "storage/rocksdb_support.h"

namespace fencegate::storage::rocksdb_support {
namespace {

using std::chrono::milliseconds;
constexpr uint64_t kMiB = uint64_t{1} << 20;

// A file system whose free bytes the test sets; counts the asks itself, so
// that the guard's own count is checked too.
struct FakeFs {
  uint64_t available = 0;
  Status error;
  int asked = 0;
  FreeSpaceGuard::FreeBytesFn Fn() {
    return [this](uint64_t* out) {
      ++asked;
      if (!error.ok()) return error;
      *out = available;
      return Status::Ok();
    };
  }
};

class FreeSpaceGuardTest : public ::testing::Test {
 protected:
  FakeFs fs_;
  FreeSpaceGuard guard_{"/data/dir", fs_.Fn()};
  FreeSpaceGuard::Clock::time_point t0_ = FreeSpaceGuard::Clock::now();
};

TEST_F(FreeSpaceGuardTest, FarFromTheFloorItAsksOncePerRecheckInterval) {
  fs_.available = 10 * 1024 * kMiB;
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(guard_.Check(100, t0_ + milliseconds(i % FreeSpaceGuard::kRecheck.count())).ok());
  }
  EXPECT_EQ(fs_.asked, 1);
  ASSERT_TRUE(guard_.Check(100, t0_ + FreeSpaceGuard::kRecheck).ok());
  EXPECT_EQ(fs_.asked, 2);
  EXPECT_EQ(guard_.asks(), 2u);
}

TEST_F(FreeSpaceGuardTest, ADiskFilledByOthersIsSeenAtTheNextAsk) {
  fs_.available = 10 * 1024 * kMiB;
  ASSERT_TRUE(guard_.Check(100, t0_).ok());
  fs_.available = kMinFreeBytes - 1;  // another process filled the disk
  Status s = guard_.Check(100, t0_ + FreeSpaceGuard::kRecheck);
  ASSERT_EQ(s.code(), Status::Code::kIoError);
  EXPECT_NE(s.message().find("no space left for the token store"), std::string::npos);
  EXPECT_NE(s.message().find("/data/dir"), std::string::npos);
  // Refused writes do not spend the room of an earlier answer: it asks again.
  EXPECT_FALSE(guard_.Check(100, t0_ + FreeSpaceGuard::kRecheck).ok());
  EXPECT_EQ(fs_.asked, 3);
}

TEST_F(FreeSpaceGuardTest, NearTheFloorItAsksBeforeEveryWrite) {
  fs_.available = kMinFreeBytes + FreeSpaceGuard::kHeadroom;  // not above it
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(guard_.Check(100, t0_).ok());
  EXPECT_EQ(fs_.asked, 5);
  fs_.available = kMinFreeBytes - 1;
  EXPECT_FALSE(guard_.Check(100, t0_).ok());
  EXPECT_EQ(fs_.asked, 6);
}

TEST_F(FreeSpaceGuardTest, ItsOwnWritesSpendTheRoomAndThenItAsks) {
  // 1 MiB above floor + headroom: room for writes of 1 MiB less a byte.
  fs_.available = kMinFreeBytes + FreeSpaceGuard::kHeadroom + kMiB;
  ASSERT_TRUE(guard_.Check(1, t0_).ok());  // asks; room left: 1 MiB - 1
  EXPECT_EQ(fs_.asked, 1);
  ASSERT_TRUE(guard_.Check(kMiB / 2, t0_).ok());  // from the room
  ASSERT_TRUE(guard_.Check(kMiB / 2 - 2, t0_).ok());  // leaves 1 byte
  EXPECT_EQ(fs_.asked, 1);
  ASSERT_TRUE(guard_.Check(1, t0_).ok());  // not less than the room: asks
  EXPECT_EQ(fs_.asked, 2);
}

TEST_F(FreeSpaceGuardTest, AnErrorOfTheFileSystemIsReturnedAndAskedAgain) {
  fs_.error = Status::IoError("cannot stat the file system of /data/dir: gone");
  Status s = guard_.Check(100, t0_);
  EXPECT_EQ(s.code(), Status::Code::kIoError);
  EXPECT_EQ(s.message(), "cannot stat the file system of /data/dir: gone");
  fs_.error = Status::Ok();
  fs_.available = 10 * 1024 * kMiB;
  EXPECT_TRUE(guard_.Check(100, t0_).ok());
  EXPECT_EQ(fs_.asked, 2);
}

TEST_F(FreeSpaceGuardTest, ForgetMakesTheNextCheckAsk) {
  fs_.available = 10 * 1024 * kMiB;
  ASSERT_TRUE(guard_.Check(100, t0_).ok());
  guard_.Forget();
  ASSERT_TRUE(guard_.Check(100, t0_).ok());
  EXPECT_EQ(fs_.asked, 2);
}

TEST(FreeSpaceGuardStatTest, TheRealFileSystemIsAskedThroughStatvfs) {
  const std::string dir = ::testing::TempDir();
  uint64_t available = 0;
  ASSERT_TRUE(FreeSpaceGuard::StatFreeBytes(dir, &available).ok());
  EXPECT_GT(available, 0u);
  Status missing = FreeSpaceGuard::StatFreeBytes(dir + "/no/such/dir", &available);
  EXPECT_EQ(missing.code(), Status::Code::kIoError);
  EXPECT_NE(missing.message().find("no/such/dir"), std::string::npos);
  FreeSpaceGuard guard(dir);
  EXPECT_EQ(guard.Check(100).ok(), available >= kMinFreeBytes);
  EXPECT_EQ(guard.asks(), 1u);
}

}  // namespace
}  // namespace fencegate::storage::rocksdb_support
