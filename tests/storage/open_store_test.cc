// OpenStore: engine selection and the errors it reports.

#include <gtest/gtest.h>

#include "storage/token_store.h"
#include "tests/storage/test_util.h"

namespace fencegate::storage {
namespace {

using testing::AdvanceSync;
using testing::GetSync;
using testing::TempDir;

TEST(OpenStoreTest, RocksDbEngineOpensAWorkingStore) {
  TempDir dir;
  StoreOptions options;
  options.path = dir.Sub("data");
  Status error = Status::IoError("not overwritten");
  std::unique_ptr<TokenStore> store = OpenStore(options, &error);
  ASSERT_NE(store, nullptr) << error.ToString();
  EXPECT_TRUE(error.ok());
  EXPECT_TRUE(store->Health().ok());
  EXPECT_TRUE(AdvanceSync(*store, "/a", 3).fence.accepted);
  EXPECT_EQ(GetSync(*store, "/a").value, 3u);
  EXPECT_TRUE(store->Close().ok());
}

// The etcd engine opens without connecting (etcd_tests drive it against a
// real etcd); endpoints it cannot use are refused at once.
TEST(OpenStoreTest, EtcdOpensOnUsableEndpointsOnly) {
  StoreOptions options;
  options.engine = "etcd";
  Status error;
  EXPECT_EQ(OpenStore(options, &error), nullptr) << "no endpoint";
  EXPECT_EQ(error.code(), Status::Code::kInvalidArgument);
  options.etcd.endpoints = {"ftp://127.0.0.1:2379"};
  EXPECT_EQ(OpenStore(options, &error), nullptr);
  EXPECT_EQ(error.code(), Status::Code::kInvalidArgument);
  options.etcd.endpoints = {"http://127.0.0.1:1"};
  std::unique_ptr<TokenStore> store = OpenStore(options, &error);
  ASSERT_NE(store, nullptr) << error.ToString();
  EXPECT_NE(store->Idempotency(), nullptr);
  EXPECT_TRUE(store->Close().ok());
}

TEST(OpenStoreTest, UnknownEngineIsInvalidArgument) {
  StoreOptions options;
  options.engine = "leveldb";
  Status error;
  EXPECT_EQ(OpenStore(options, &error), nullptr);
  EXPECT_EQ(error.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(error.message().find("leveldb"), std::string::npos);
}

TEST(OpenStoreTest, SecondOpenOfTheSameDirIsBusy) {
  TempDir dir;
  StoreOptions options;
  options.path = dir.Sub("data");
  Status error;
  std::unique_ptr<TokenStore> first = OpenStore(options, &error);
  ASSERT_NE(first, nullptr) << error.ToString();

  EXPECT_EQ(OpenStore(options, &error), nullptr);
  EXPECT_EQ(error.code(), Status::Code::kBusy) << error.ToString();
  EXPECT_NE(error.message().find("another process holds the data dir lock"),
            std::string::npos)
      << error.message();

  ASSERT_TRUE(first->Close().ok());
  std::unique_ptr<TokenStore> again = OpenStore(options, &error);
  EXPECT_NE(again, nullptr) << "lock not released by Close(): "
                            << error.ToString();
}

TEST(OpenStoreTest, NullErrorPointerIsAllowed) {
  StoreOptions options;
  options.engine = "etcd";
  EXPECT_EQ(OpenStore(options, nullptr), nullptr);
}

}  // namespace
}  // namespace fencegate::storage
