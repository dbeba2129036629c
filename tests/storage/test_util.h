#pragma once
// Helpers shared by the storage tests: temp directories and blocking
// wrappers around the asynchronous TokenStore calls. The wrappers wait on a
// future with a generous deadline, so a handler that never runs fails the
// test instead of hanging it.

#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include <gtest/gtest.h>

#include "storage/rocksdb_store.h"
#include "storage/token_store.h"
#include "tests/storage/tree_model.h"

namespace fencegate::storage::testing {

inline constexpr std::chrono::seconds kHandlerDeadline{60};

// A fresh directory under $TMPDIR, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "fencegate-storage-XXXXXX")
            .string();
    if (mkdtemp(tmpl.data()) == nullptr) {
      ADD_FAILURE() << "mkdtemp failed for " << tmpl;
    }
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string Sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

struct FenceResult {
  Status status;
  Fence fence;
};

struct BatchResult {
  Status status;
  BatchFence fence;
};

struct TreeResult {
  Status status;
  TreeVerdict verdict;
};

struct NodeResult {
  Status status;
  std::optional<TreeNode> node;
};

struct GetResult {
  Status status;
  std::optional<uint64_t> value;
};

template <typename T>
T WaitFor(std::future<T>& f, T on_timeout) {
  if (f.wait_for(kHandlerDeadline) != std::future_status::ready) {
    ADD_FAILURE() << "store handler did not run within the deadline";
    return on_timeout;
  }
  return f.get();
}

inline FenceResult AdvanceSync(TokenStore& store, const std::string& key,
                               uint64_t token) {
  auto p = std::make_shared<std::promise<FenceResult>>();
  auto f = p->get_future();
  store.Advance(key, token, [p](const Status& s, Fence fence) {
    p->set_value(FenceResult{s, fence});
  });
  return WaitFor(f, FenceResult{Status::Unavailable("test deadline"), {}});
}

inline FenceResult RaiseSync(TokenStore& store, const std::string& key,
                             uint64_t token) {
  auto p = std::make_shared<std::promise<FenceResult>>();
  auto f = p->get_future();
  store.Raise(key, token, [p](const Status& s, Fence fence) {
    p->set_value(FenceResult{s, fence});
  });
  return WaitFor(f, FenceResult{Status::Unavailable("test deadline"), {}});
}

inline BatchResult AdvanceAllSync(TokenStore& store, std::vector<KeyToken> items) {
  auto p = std::make_shared<std::promise<BatchResult>>();
  auto f = p->get_future();
  store.AdvanceAll(std::move(items), [p](const Status& s, BatchFence fence) {
    p->set_value(BatchResult{s, std::move(fence)});
  });
  return WaitFor(f, BatchResult{Status::Unavailable("test deadline"), {}});
}

inline TreeResult AdvanceTreeSync(TokenStore& store, TreeWrite write) {
  auto p = std::make_shared<std::promise<TreeResult>>();
  auto f = p->get_future();
  store.AdvanceTree(std::move(write), [p](const Status& s, TreeVerdict verdict) {
    p->set_value(TreeResult{s, std::move(verdict)});
  });
  return WaitFor(f, TreeResult{Status::Unavailable("test deadline"), {}});
}

inline NodeResult GetNodeSync(TokenStore& store, const std::string& path) {
  auto p = std::make_shared<std::promise<NodeResult>>();
  auto f = p->get_future();
  store.GetNode(path, [p](const Status& s, std::optional<TreeNode> node) {
    p->set_value(NodeResult{s, std::move(node)});
  });
  return WaitFor(f, NodeResult{Status::Unavailable("test deadline"), {}});
}

// Sends `writes` random tree writes (tree_model.h's Workload) to `store`
// and to the plain model of the rule: "" when every verdict is the model's,
// else what the first that is not was.
inline std::string TreeDisagreement(TokenStore& store, uint32_t seed, int writes) {
  Model model;
  Workload load(seed);
  for (int i = 0; i < writes; ++i) {
    const TreeWrite w = load.Next();
    const TreeVerdict::Kind want = model.Decide(w);
    TreeResult r = AdvanceTreeSync(store, w);
    if (!r.status.ok()) return "write " + std::to_string(i) + ": " + r.status.ToString();
    if (r.verdict.kind != want) {
      return "write " + std::to_string(i) + " to " + w.targets[0].path + ": verdict " +
             std::to_string(static_cast<int>(r.verdict.kind)) + ", the model's " +
             std::to_string(static_cast<int>(want));
    }
  }
  return {};
}

inline GetResult GetSync(TokenStore& store, const std::string& key) {
  auto p = std::make_shared<std::promise<GetResult>>();
  auto f = p->get_future();
  store.Get(key, [p](const Status& s, std::optional<uint64_t> v) {
    p->set_value(GetResult{s, v});
  });
  return WaitFor(f, GetResult{Status::Unavailable("test deadline"), {}});
}

inline std::unique_ptr<RocksDbStore> OpenRocks(
    const std::string& path, Durability durability = Durability::kSync,
    size_t memtable_buckets = RocksDbStoreOptions{}.memtable_buckets) {
  RocksDbStoreOptions options;
  options.path = path;
  options.durability = durability;
  options.memtable_buckets = memtable_buckets;
  std::unique_ptr<RocksDbStore> store;
  Status s = RocksDbStore::Open(options, &store);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return store;
}

}  // namespace fencegate::storage::testing
