#pragma once
// The tree of paths (docs/contract.md, "Nested resources"): what a store
// keeps per fenced path besides the keys' tokens, and the rule that decides
// a write over it. Engine-neutral and pure: an engine reads the records a
// write needs (TreeReads), calls DecideTree, and writes what it returns in
// the same atomic write as the keys; RocksDbStore, EtcdStore and MemoryStore
// all decide through this one function.
//
// Paths are canonical (fence/canonical_path.h): "/" or "/a/b", no trailing
// slash. A node is kept for every path a tree write targeted and for every
// ancestor of one; an ancestor's node sums up what lies below it, so that a
// decision reads the nodes on the targets' paths to the root and never
// scans a subtree.

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/container/small_vector.hpp>

#include "storage/status.h"

namespace fencegate::storage {

// How a target's route orders tokens of different keys.
enum class Nesting : uint8_t {
  kPerKey,     // never compared: a subtree write over other keys is refused
  kShared,     // one counter for the route: compared along the tree
  kUncovered,  // no route covers the target: refused over anything fenced
};

// One path a write changes: its own path, or a COPY/MOVE's Destination.
struct TreeTarget {
  std::string path;     // canonical
  std::string key;      // the key the target is fenced under; "" when kUncovered
  bool subtree = false; // the write may change every path below `path` too
  Nesting nesting = Nesting::kPerKey;
};

// A tree write: the keys its routes fence it under (distinct), all with the
// token (as TokenStore::AdvanceAll), and its targets (one; two for COPY and
// MOVE). A write with only kUncovered targets has no keys.
struct TreeWrite {
  std::vector<std::string> keys;
  uint64_t token = 0;
  std::vector<TreeTarget> targets;
  // An administrative raise (import, and entering an existing store's paths
  // into the tree): never refused, never lowers anything; the keys and the
  // targets' nodes take at least `token`, as an accepted write would leave
  // them.
  bool raise = false;
};

// A key fenced below a path, with one path that is.
struct TreeBelow {
  std::string key;
  std::string path;
  bool operator==(const TreeBelow&) const = default;
};

// The keys fenced below a path (TreeNode::below_keys): a list that copies of
// a node share until one of them changes it. Every write below a
// collection copies the collection's node to raise its `below`, and almost
// none changes its list.
class TreeBelowKeys {
 public:
  using List = std::vector<TreeBelow>;
  TreeBelowKeys() = default;
  TreeBelowKeys(std::initializer_list<TreeBelow> items)
      : items_(std::make_shared<const List>(items)) {}

  const List& list() const { return items_ != nullptr ? *items_ : Empty(); }
  List::const_iterator begin() const { return list().begin(); }
  List::const_iterator end() const { return list().end(); }
  size_t size() const { return list().size(); }
  bool empty() const { return list().empty(); }
  const TreeBelow& front() const { return list().front(); }
  void push_back(TreeBelow item) {
    List next = list();
    next.push_back(std::move(item));
    items_ = std::make_shared<const List>(std::move(next));
  }
  void assign(List items) { items_ = std::make_shared<const List>(std::move(items)); }
  bool operator==(const TreeBelowKeys& other) const {
    return items_ == other.items_ || list() == other.list();
  }

 private:
  static const List& Empty() {
    static const List kEmpty;
    return kEmpty;
  }
  std::shared_ptr<const List> items_;  // immutable once shared
};

// What a store keeps for one path.
struct TreeNode {
  // Distinct keys fenced strictly below the path, each with one path that
  // is, up to kBelowKeys of them; `more_keys` once there were more.
  using Below = TreeBelow;
  static constexpr size_t kBelowKeys = 4;

  bool fenced = false;     // a write targeted this path itself
  std::string key;         // the key of the last such write
  uint64_t token = 0;      // the highest token of those writes
  bool subtree_written = false;  // one of those was a subtree write
  uint64_t subtree = 0;    // the highest token of those that were subtree writes
  uint64_t below = 0;      // the highest token accepted strictly below
  std::string below_path;  // a path strictly below that holds `below`
  TreeBelowKeys below_keys;
  bool more_keys = false;

  bool operator==(const TreeNode&) const = default;
};

// Deepest path a tree write may target, in segments: deciding one reads a
// node per segment, and a COPY or MOVE over two such paths with every node
// new still fits one etcd transaction (its default --max-txn-ops, 128).
inline constexpr size_t kMaxTreeDepth = 60;
// Longest path a tree write may target (a request head is at most
// limits.max_header_bytes, 16 KiB by default, anyway).
inline constexpr size_t kMaxTreePathBytes = 16384;

// The record of a node, as every engine stores it (a versioned binary
// form); false when `in` is not one.
std::string EncodeTreeNode(const TreeNode& node);
// The same into `*into`, replacing what it held: a buffer kept between
// writes is not allocated again.
void EncodeTreeNodeInto(const TreeNode& node, std::string* into);
bool DecodeTreeNode(std::string_view in, TreeNode* node);

// A path a tree write may target: canonical ("/" or "/a/b": no empty
// segment, no trailing slash), at most kMaxTreeDepth segments and
// kMaxTreePathBytes bytes.
bool IsTreePath(std::string_view path);

// Paths as views, held inline up to a depth that covers most writes: a
// decision takes no allocation for them.
using TreePathViews = boost::container::small_vector<std::string_view, 16>;

// The strict ancestors of a canonical path, root first: "/a/b" -> "/", "/a".
// Views into `path`.
TreePathViews TreeAncestors(std::string_view path);
// Segments of a canonical path: "/" 0, "/a/b" 2.
size_t TreeDepth(std::string_view path);

// The records DecideTree reads: the keys' stored tokens (nullopt: never
// stored) and the nodes of every target and ancestor (null: none). The
// engine fills them before the call, as of the writes decided before this
// one; the nodes are the engine's, and live through the call.
struct TreeReads {
  std::vector<std::optional<uint64_t>> keys;  // per TreeWrite::keys item
  // Per path of TreeNodePaths(write), in that order.
  boost::container::small_vector<const TreeNode*, 16> nodes;
};

// The paths whose nodes a write needs, each once: every target's ancestors
// and the target itself. TreeNodePathViews: the same, as views into the
// write's targets.
std::vector<std::string> TreeNodePaths(const TreeWrite& write);
TreePathViews TreeNodePathViews(const TreeWrite& write);

struct TreeVerdict {
  enum class Kind {
    kAccepted,
    kStaleKey,    // a key's stored token is above the write's (`stale` names it)
    kStaleTree,   // shared: a write that changed the target has a higher token
    kNestedKeys,  // a subtree write over paths that no token of its orders
  };
  Kind kind = Kind::kAccepted;
  std::vector<uint64_t> current;  // per key: the stored token after the decision
  size_t stale = SIZE_MAX;        // kStaleKey: index of the first stale key
  std::string path;     // kStaleTree: the path whose token refused it; kNestedKeys: a fenced
                        // path at or below the target, under another key
  std::string key;      // kNestedKeys: that path's key ("" when the path's own key is unknown)
  uint64_t tree_token = 0;  // kStaleTree: the token that refused it
  std::string target;   // kStaleTree, kNestedKeys: the target refused
  int64_t owner = 0;    // as Fence::owner (token_store.h)
};

// What an accepted write changes: the keys' new tokens (only those that
// rise) and the nodes that change, by path, whole.
struct TreeChanges {
  std::vector<std::pair<std::string, uint64_t>> keys;
  std::vector<std::pair<std::string, TreeNode>> nodes;
};

// The rule of docs/contract.md, "Nested resources", for one write, against
// `reads`. Accepted: fills *changes (empty otherwise). InvalidArgument for a
// write that is not well formed (no target, a path that is not canonical or
// deeper than kMaxTreeDepth, reads of the wrong size).
Status DecideTree(const TreeWrite& write, const TreeReads& reads, TreeVerdict* verdict,
                  TreeChanges* changes);

}  // namespace fencegate::storage
