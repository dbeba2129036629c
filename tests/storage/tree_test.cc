// The tree rule (storage/tree.h): node records, ancestors, the cases of
// docs/contract.md "Nested resources", and a property test of DecideTree
// against a plain model of the rule over random trees and writes. The model
// keeps every accepted write and answers by scanning them; DecideTree reads
// only the nodes on the targets' paths. The same random runs against a
// model without the ancestor check, and one without the subtree check,
// must disagree somewhere: the property test tells those rules apart.

#include "storage/tree.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "tests/storage/tree_model.h"

namespace fencegate::storage {
namespace {

TEST(TreeNode, EncodesAndDecodes) {
  TreeNode n;
  n.fenced = true;
  n.key = "tenant/acme";
  n.token = 35;
  n.subtree_written = true;
  n.subtree = 34;
  n.below = 1ull << 63;
  n.below_path = "/a/b/c";
  n.below_keys = {{"/a/b/c", "/a/b/c"}, {"k", "/a/x"}};
  n.more_keys = true;
  TreeNode back;
  ASSERT_TRUE(DecodeTreeNode(EncodeTreeNode(n), &back));
  EXPECT_EQ(back, n);
  ASSERT_TRUE(DecodeTreeNode(EncodeTreeNode(TreeNode{}), &back));
  EXPECT_EQ(back, TreeNode{});
}

TEST(TreeNode, RefusesWhatIsNotARecord) {
  TreeNode back;
  TreeNode fenced;
  fenced.fenced = true;
  fenced.token = 3;
  const std::string good = EncodeTreeNode(fenced);
  EXPECT_FALSE(DecodeTreeNode("", &back));
  EXPECT_FALSE(DecodeTreeNode(std::string(8, '\0'), &back));      // a token's 8 bytes
  EXPECT_FALSE(DecodeTreeNode(good.substr(0, good.size() - 1), &back));
  EXPECT_FALSE(DecodeTreeNode(good + "x", &back));
  std::string other_version = good;
  other_version[0] = 2;
  EXPECT_FALSE(DecodeTreeNode(other_version, &back));
}

TEST(TreeAncestors, RootFirst) {
  EXPECT_TRUE(TreeAncestors("/").empty());
  EXPECT_EQ(TreeAncestors("/a"), (TreePathViews{"/"}));
  EXPECT_EQ(TreeAncestors("/a/bb/c"), (TreePathViews{"/", "/a", "/a/bb"}));
  EXPECT_EQ(TreeDepth("/"), 0u);
  EXPECT_EQ(TreeDepth("/a/bb/c"), 3u);
}

// An engine in a map: reads what DecideTree needs, applies what it returns.
class MapTree {
 public:
  Status Decide(const TreeWrite& w, TreeVerdict* v) {
    TreeReads reads;
    for (const std::string& k : w.keys) {
      auto it = keys_.find(k);
      reads.keys.push_back(it == keys_.end() ? std::nullopt : std::optional<uint64_t>(it->second));
    }
    for (const std::string& p : TreeNodePaths(w)) {
      auto it = nodes_.find(p);
      reads.nodes.push_back(it == nodes_.end() ? nullptr : &it->second);
    }
    TreeChanges changes;
    Status s = DecideTree(w, reads, v, &changes);
    if (!s.ok()) return s;
    if (v->kind != TreeVerdict::Kind::kAccepted) {
      EXPECT_TRUE(changes.keys.empty() && changes.nodes.empty());
    }
    for (auto& [k, t] : changes.keys) keys_[k] = t;
    for (auto& [p, n] : changes.nodes) nodes_[p] = n;
    return s;
  }
  const std::map<std::string, TreeNode>& nodes() const { return nodes_; }

 private:
  std::map<std::string, uint64_t> keys_;
  std::map<std::string, TreeNode> nodes_;
};

TreeTarget Target(std::string path, std::string key, bool subtree, Nesting n) {
  return TreeTarget{std::move(path), std::move(key), subtree, n};
}

TreeWrite One(std::string path, uint64_t token, bool subtree, Nesting n = Nesting::kPerKey,
              std::string key = "") {
  if (key.empty() && n != Nesting::kUncovered) key = path;
  TreeWrite w;
  if (!key.empty()) w.keys.push_back(key);
  w.token = token;
  w.targets.push_back(Target(std::move(path), std::move(key), subtree, n));
  return w;
}

TreeVerdict::Kind Kind(MapTree& tree, const TreeWrite& w) {
  TreeVerdict v;
  EXPECT_TRUE(tree.Decide(w, &v).ok());
  return v.kind;
}

using K = TreeVerdict::Kind;

TEST(DecideTree, PerKeyRefusesASubtreeWriteOverOtherKeysAndNamesOne) {
  MapTree tree;
  ASSERT_EQ(Kind(tree, One("/objects/d/x", 34, true)), K::kAccepted);
  // DELETE /objects/d/ with a token of its own key: it would delete x.
  TreeVerdict v;
  ASSERT_TRUE(tree.Decide(One("/objects/d", 99, true), &v).ok());
  EXPECT_EQ(v.kind, K::kNestedKeys);
  EXPECT_EQ(v.path, "/objects/d/x");
  EXPECT_EQ(v.key, "/objects/d/x");
  EXPECT_EQ(v.target, "/objects/d");
  // The route root too; a write that changes only the collection is fine.
  EXPECT_EQ(Kind(tree, One("/objects", 99, true)), K::kNestedKeys);
  EXPECT_EQ(Kind(tree, One("/objects/d", 1, false)), K::kAccepted);
  // The key's own check still applies below.
  EXPECT_EQ(Kind(tree, One("/objects/d/x", 33, true)), K::kStaleKey);
}

TEST(DecideTree, PerKeyAllowsDescendantsUnderTheWritesOwnKey) {
  MapTree tree;
  ASSERT_EQ(Kind(tree, One("/tenants/acme/inv/7", 35, false, Nesting::kPerKey, "tenant/acme")),
            K::kAccepted);
  EXPECT_EQ(Kind(tree, One("/tenants/acme", 34, true, Nesting::kPerKey, "tenant/acme")),
            K::kStaleKey);
  EXPECT_EQ(Kind(tree, One("/tenants/acme", 35, true, Nesting::kPerKey, "tenant/acme")),
            K::kAccepted);
}

TEST(DecideTree, UncoveredSubtreeWritesOverFencedPathsAreRefused) {
  MapTree tree;
  ASSERT_EQ(Kind(tree, One("/tenants/acme/inv/7", 35, false, Nesting::kPerKey, "tenant/acme")),
            K::kAccepted);
  EXPECT_EQ(Kind(tree, One("/tenants", 0, true, Nesting::kUncovered)), K::kNestedKeys);
  EXPECT_EQ(Kind(tree, One("/", 0, true, Nesting::kUncovered)), K::kNestedKeys);
  EXPECT_EQ(Kind(tree, One("/tenants/acme/inv/7", 0, true, Nesting::kUncovered)), K::kNestedKeys);
  EXPECT_EQ(Kind(tree, One("/staging", 0, true, Nesting::kUncovered)), K::kAccepted);
  // An uncovered write leaves nothing in the tree.
  EXPECT_EQ(tree.nodes().count("/staging"), 0u);
}

TEST(DecideTree, SharedComparesAncestorsSubtreeWritesAndEverythingBelow) {
  MapTree tree;
  const Nesting s = Nesting::kShared;
  ASSERT_EQ(Kind(tree, One("/o/d/x", 34, false, s)), K::kAccepted);
  // A subtree write to an ancestor must be newer than everything below.
  TreeVerdict v;
  ASSERT_TRUE(tree.Decide(One("/o/d", 33, true, s), &v).ok());
  EXPECT_EQ(v.kind, K::kStaleTree);
  EXPECT_EQ(v.path, "/o/d/x");
  EXPECT_EQ(v.tree_token, 34u);
  ASSERT_EQ(Kind(tree, One("/o/d", 40, true, s)), K::kAccepted);
  // Below it, a write older than that subtree write is refused, under any key.
  ASSERT_TRUE(tree.Decide(One("/o/d/y", 39, false, s), &v).ok());
  EXPECT_EQ(v.kind, K::kStaleTree);
  EXPECT_EQ(v.path, "/o/d");
  EXPECT_EQ(v.tree_token, 40u);
  EXPECT_EQ(Kind(tree, One("/o/d/y", 40, false, s)), K::kAccepted);
  // A non-subtree write to an ancestor is not compared with what is below.
  EXPECT_EQ(Kind(tree, One("/o", 1, false, s)), K::kAccepted);
}

TEST(DecideTree, BothTargetsOfAMoveAreDecidedTogether) {
  MapTree tree;
  ASSERT_EQ(Kind(tree, One("/o/d/x", 34, false)), K::kAccepted);
  TreeWrite move;
  move.keys = {"/trash/d", "/o/d"};
  move.token = 50;
  move.targets = {Target("/o/d", "/o/d", true, Nesting::kPerKey),
                  Target("/trash/d", "/trash/d", true, Nesting::kPerKey)};
  EXPECT_EQ(Kind(tree, move), K::kNestedKeys);
  // Refused whole: neither key nor node was written.
  EXPECT_EQ(tree.nodes().count("/trash/d"), 0u);
}

TEST(DecideTree, RefusesAWriteThatIsNotWellFormed) {
  TreeVerdict v;
  TreeChanges c;
  TreeReads none;
  EXPECT_FALSE(DecideTree(TreeWrite{}, none, &v, &c).ok());
  EXPECT_FALSE(DecideTree(One("/a/", 1, true), none, &v, &c).ok());
  EXPECT_FALSE(DecideTree(One("a", 1, true), none, &v, &c).ok());
  std::string deep;
  for (size_t i = 0; i <= kMaxTreeDepth; ++i) deep += "/s";
  TreeWrite w = One(deep, 1, true);
  TreeReads reads;
  reads.keys.resize(1);
  reads.nodes.resize(TreeNodePaths(w).size());
  EXPECT_FALSE(DecideTree(w, reads, &v, &c).ok());
  w = One("/a", 1, true);
  EXPECT_FALSE(DecideTree(w, none, &v, &c).ok());  // reads of the wrong size
  w.targets[0].key = "another";
  reads.nodes.resize(TreeNodePaths(w).size());
  EXPECT_FALSE(DecideTree(w, reads, &v, &c).ok());  // a target's key is not the write's
}

// ---------------------------------------------------------------------------
// The property test (the model and the workload: tests/storage/tree_model.h).

using testing::Model;
using testing::ModelFlaws;
using testing::Workload;

// Runs `runs` random sequences of `writes` writes; returns how many verdicts
// differed from the model's (stopping each sequence at its first).
size_t Disagreements(ModelFlaws flaws, int runs, int writes, std::string* first) {
  size_t differ = 0;
  for (int run = 0; run < runs; ++run) {
    MapTree tree;
    Model model(flaws);
    Workload load(static_cast<uint32_t>(run) + 1);
    for (int i = 0; i < writes; ++i) {
      const TreeWrite w = load.Next();
      TreeVerdict v;
      const Status s = tree.Decide(w, &v);
      EXPECT_TRUE(s.ok()) << s.ToString();
      const K want = model.Decide(w);
      if (v.kind != want) {
        if (differ++ == 0 && first != nullptr) {
          *first = "run " + std::to_string(run) + " write " + std::to_string(i) + ": target " +
                   w.targets[0].path + " token " + std::to_string(w.token) + ", tree " +
                   std::to_string(static_cast<int>(v.kind)) + ", model " +
                   std::to_string(static_cast<int>(want));
        }
        break;
      }
    }
  }
  return differ;
}

TEST(DecideTreeProperty, EveryVerdictIsTheModels) {
  std::string first;
  EXPECT_EQ(Disagreements({}, 300, 200, &first), 0u) << first;
}

TEST(DecideTreeProperty, TellsApartARuleWithoutTheAncestorCheck) {
  EXPECT_GT(Disagreements({.no_ancestor_check = true}, 300, 200, nullptr), 0u);
}

TEST(DecideTreeProperty, TellsApartARuleWithoutTheSubtreeCheck) {
  EXPECT_GT(Disagreements({.no_subtree_check = true}, 300, 200, nullptr), 0u);
}

}  // namespace
}  // namespace fencegate::storage
