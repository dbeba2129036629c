#include "storage/status.h"

#include <gtest/gtest.h>

namespace fencegate::storage {
namespace {

TEST(StatusTest, OkByDefault) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kOk);
  EXPECT_EQ(s.ToString(), "OK");
  EXPECT_EQ(Status::Ok().ToString(), "OK");
}

TEST(StatusTest, ToStringNamesTheKindThenTheMessage) {
  EXPECT_EQ(Status::IoError("disk gone").ToString(), "IO error: disk gone");
  EXPECT_EQ(Status::NotFound("k").ToString(), "NotFound: k");
  EXPECT_EQ(Status::InvalidArgument("x").ToString(), "Invalid argument: x");
  EXPECT_EQ(Status::Corruption("bad").ToString(), "Corruption: bad");
  EXPECT_EQ(Status::Unavailable("closed").ToString(), "Unavailable: closed");
  EXPECT_EQ(Status::Busy("locked").ToString(), "Busy: locked");
}

TEST(StatusTest, EmptyMessageHasNoSeparator) {
  EXPECT_EQ(Status::IoError("").ToString(), "IO error");
}

TEST(StatusTest, CodesAndMessagesSurviveCopies) {
  Status s = Status::Corruption("value has 3 bytes");
  Status copy = s;
  EXPECT_FALSE(copy.ok());
  EXPECT_EQ(copy.code(), Status::Code::kCorruption);
  EXPECT_EQ(copy.message(), "value has 3 bytes");
}

}  // namespace
}  // namespace fencegate::storage
