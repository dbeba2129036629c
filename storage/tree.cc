#include "storage/tree.h"

#include <algorithm>
#include <cstring>

namespace fencegate::storage {

namespace {

constexpr char kNodeVersion = 1;
constexpr uint8_t kFenced = 1;
constexpr uint8_t kMoreKeys = 2;
constexpr uint8_t kSubtreeWritten = 4;

// Fixed-width little-endian fields, written into space reserved up front:
// a node is encoded on every write that changes it.
void PutU64(std::string* out, uint64_t v) {
  char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  out->append(b, sizeof b);
}
void PutBytes(std::string* out, std::string_view s) {
  const auto n = static_cast<uint32_t>(s.size());
  char b[4];
  for (int i = 0; i < 4; ++i) b[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out->append(b, sizeof b);
  out->append(s);
}

// Reads from the front of `in`; false when it is too short.
bool GetU64(std::string_view* in, uint64_t* v) {
  if (in->size() < 8) return false;
  *v = 0;
  for (int i = 7; i >= 0; --i) *v = (*v << 8) | static_cast<unsigned char>((*in)[i]);
  in->remove_prefix(8);
  return true;
}
bool GetBytes(std::string_view* in, std::string* s) {
  if (in->size() < 4) return false;
  uint32_t n = 0;
  for (int i = 3; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>((*in)[i]);
  in->remove_prefix(4);
  if (in->size() < n) return false;
  s->assign(in->substr(0, n));
  in->remove_prefix(n);
  return true;
}

bool IsCanonical(std::string_view path) {
  if (path.empty() || path.front() != '/') return false;
  if (path.size() > 1 && path.back() == '/') return false;
  return path.find("//") == std::string_view::npos;
}

}  // namespace

bool IsTreePath(std::string_view path) {
  return IsCanonical(path) && path.size() <= kMaxTreePathBytes && TreeDepth(path) <= kMaxTreeDepth;
}

std::string EncodeTreeNode(const TreeNode& node) {
  std::string out;
  EncodeTreeNodeInto(node, &out);
  return out;
}

void EncodeTreeNodeInto(const TreeNode& node, std::string* into) {
  std::string& out = *into;
  out.clear();
  size_t size = 2 + 3 * 8 + 4 + node.key.size() + 4 + node.below_path.size() + 1;
  for (const TreeNode::Below& b : node.below_keys) size += 8 + b.key.size() + b.path.size();
  out.reserve(size);
  out.push_back(kNodeVersion);
  out.push_back(static_cast<char>((node.fenced ? kFenced : 0) | (node.more_keys ? kMoreKeys : 0) |
                                  (node.subtree_written ? kSubtreeWritten : 0)));
  PutU64(&out, node.token);
  PutU64(&out, node.subtree);
  PutU64(&out, node.below);
  PutBytes(&out, node.key);
  PutBytes(&out, node.below_path);
  out.push_back(static_cast<char>(node.below_keys.size()));
  for (const TreeNode::Below& b : node.below_keys) {
    PutBytes(&out, b.key);
    PutBytes(&out, b.path);
  }
}

bool DecodeTreeNode(std::string_view in, TreeNode* node) {
  *node = TreeNode{};
  if (in.size() < 2 || in[0] != kNodeVersion) return false;
  const auto flags = static_cast<uint8_t>(in[1]);
  if ((flags & ~(kFenced | kMoreKeys | kSubtreeWritten)) != 0) return false;
  node->fenced = (flags & kFenced) != 0;
  node->subtree_written = (flags & kSubtreeWritten) != 0;
  node->more_keys = (flags & kMoreKeys) != 0;
  in.remove_prefix(2);
  if (!GetU64(&in, &node->token) || !GetU64(&in, &node->subtree) || !GetU64(&in, &node->below) ||
      !GetBytes(&in, &node->key) || !GetBytes(&in, &node->below_path) || in.empty()) {
    return false;
  }
  const auto n = static_cast<size_t>(static_cast<unsigned char>(in[0]));
  in.remove_prefix(1);
  if (n > TreeNode::kBelowKeys) return false;
  if (n > 0) {
    TreeBelowKeys::List below(n);
    for (TreeNode::Below& b : below) {
      if (!GetBytes(&in, &b.key) || !GetBytes(&in, &b.path)) return false;
    }
    node->below_keys.assign(std::move(below));
  }
  return in.empty();
}

TreePathViews TreeAncestors(std::string_view path) {
  TreePathViews out;
  if (path.size() <= 1) return out;  // "/" has none
  out.push_back(path.substr(0, 1));
  for (size_t i = path.find('/', 1); i != std::string_view::npos; i = path.find('/', i + 1)) {
    out.push_back(path.substr(0, i));
  }
  return out;
}

size_t TreeDepth(std::string_view path) {
  if (path.size() <= 1) return 0;
  return static_cast<size_t>(std::count(path.begin(), path.end(), '/'));
}

TreePathViews TreeNodePathViews(const TreeWrite& write) {
  TreePathViews out;
  auto add = [&out](std::string_view p) {
    if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
  };
  for (const TreeTarget& t : write.targets) {
    for (std::string_view a : TreeAncestors(t.path)) add(a);
    add(t.path);
  }
  return out;
}

std::vector<std::string> TreeNodePaths(const TreeWrite& write) {
  const TreePathViews views = TreeNodePathViews(write);
  return std::vector<std::string>(views.begin(), views.end());
}

Status DecideTree(const TreeWrite& write, const TreeReads& reads, TreeVerdict* verdict,
                  TreeChanges* changes) {
  *verdict = TreeVerdict{};
  *changes = TreeChanges{};
  if (write.targets.empty()) return Status::InvalidArgument("a tree write without a target");
  for (const TreeTarget& t : write.targets) {
    if (!IsCanonical(t.path)) {
      return Status::InvalidArgument("tree target '" + t.path + "' is not a canonical path");
    }
    if (TreeDepth(t.path) > kMaxTreeDepth) {
      return Status::InvalidArgument("tree target is deeper than " +
                                     std::to_string(kMaxTreeDepth) + " segments");
    }
    const bool has_key = std::find(write.keys.begin(), write.keys.end(), t.key) != write.keys.end();
    if ((t.nesting == Nesting::kUncovered) != t.key.empty() ||
        (t.nesting != Nesting::kUncovered && !has_key)) {
      return Status::InvalidArgument("tree target '" + t.path +
                                     "': a covered target names one of the write's keys, an "
                                     "uncovered one none");
    }
  }
  const TreePathViews paths = TreeNodePathViews(write);
  if (reads.keys.size() != write.keys.size() || reads.nodes.size() != paths.size()) {
    return Status::InvalidArgument("tree reads do not match the write");
  }
  // A path's place in `paths` (and `reads.nodes`): a handful of them, so a
  // scan beats a map.
  auto index_of = [&paths](std::string_view p) {
    return static_cast<size_t>(std::find(paths.begin(), paths.end(), p) - paths.begin());
  };
  auto read = [&](std::string_view p) { return reads.nodes[index_of(p)]; };
  // The nodes this write changes, copied from the read ones as it changes
  // them; reserved, so that a reference to one survives adding another.
  boost::container::small_vector<std::pair<size_t, TreeNode>, 16> after;
  after.reserve(paths.size());

  // The keys: as AdvanceAll.
  verdict->current.resize(write.keys.size());
  for (size_t i = 0; i < write.keys.size(); ++i) {
    verdict->current[i] = reads.keys[i].value_or(0);
    if (reads.keys[i] && write.token < *reads.keys[i] && verdict->stale == SIZE_MAX) {
      verdict->stale = i;
    }
  }
  if (verdict->stale != SIZE_MAX && !write.raise) {
    verdict->kind = TreeVerdict::Kind::kStaleKey;
    return Status::Ok();
  }
  verdict->stale = SIZE_MAX;

  // Every target against the tree as it was before this write.
  for (const TreeTarget& t : write.targets) {
    if (write.raise) break;
    const TreeNode* node = read(t.path);
    auto nested = [&](std::string path, std::string key) {
      verdict->kind = TreeVerdict::Kind::kNestedKeys;
      verdict->path = std::move(path);
      verdict->key = std::move(key);
      verdict->target = t.path;
    };
    auto stale = [&](std::string_view path, uint64_t token) {
      verdict->kind = TreeVerdict::Kind::kStaleTree;
      verdict->path = std::string(path);
      verdict->tree_token = token;
      verdict->target = t.path;
    };
    switch (t.nesting) {
      case Nesting::kUncovered:
        // Its own path fenced, or anything below it.
        if (node && node->fenced) {
          nested(t.path, node->key);
          return Status::Ok();
        }
        if (node && !node->below_keys.empty()) {
          nested(node->below_keys.front().path, node->below_keys.front().key);
          return Status::Ok();
        }
        break;
      case Nesting::kPerKey:
        if (t.subtree && node) {
          for (const TreeNode::Below& b : node->below_keys) {
            // kBelowKeys distinct keys are listed once there are more: one
            // of them is not the target's.
            if (b.key != t.key) {
              nested(b.path, b.key);
              return Status::Ok();
            }
          }
        }
        break;
      case Nesting::kShared:
        for (std::string_view a : TreeAncestors(t.path)) {
          const TreeNode* up = read(a);
          if (up != nullptr && up->subtree > write.token) {
            stale(a, up->subtree);
            return Status::Ok();
          }
        }
        if (node && node->fenced && node->token > write.token) {
          stale(t.path, node->token);
          return Status::Ok();
        }
        if (t.subtree && node && !node->below_path.empty() && node->below > write.token) {
          stale(node->below_path, node->below);
          return Status::Ok();
        }
        break;
    }
  }

  // Accepted: the keys that rise, and the nodes.
  for (size_t i = 0; i < write.keys.size(); ++i) {
    if (!reads.keys[i] || write.token > *reads.keys[i]) {
      changes->keys.emplace_back(write.keys[i], write.token);
    }
    verdict->current[i] = std::max(verdict->current[i], write.token);
  }
  auto node_of = [&](std::string_view p) -> TreeNode& {
    const size_t i = index_of(p);
    for (auto& [j, node] : after) {
      if (j == i) return node;
    }
    return after.emplace_back(i, reads.nodes[i] != nullptr ? *reads.nodes[i] : TreeNode{}).second;
  };
  for (const TreeTarget& t : write.targets) {
    if (t.nesting == Nesting::kUncovered) continue;  // it changes nothing fenced
    TreeNode& own = node_of(t.path);
    own.token = own.fenced ? std::max(own.token, write.token) : write.token;
    own.fenced = true;
    own.key = t.key;
    if (t.subtree) {
      own.subtree = own.subtree_written ? std::max(own.subtree, write.token) : write.token;
      own.subtree_written = true;
    }
    for (std::string_view a : TreeAncestors(t.path)) {
      // Copied only when this write changes it: most writes below a busy
      // collection leave its list of keys as it was.
      const TreeNode* was = read(a);
      auto listed = [&t](const TreeNode& n) {
        return std::any_of(n.below_keys.begin(), n.below_keys.end(),
                           [&t](const TreeNode::Below& b) { return b.key == t.key; });
      };
      if (was != nullptr && !was->below_path.empty() && write.token <= was->below &&
          (listed(*was) || was->more_keys)) {
        continue;
      }
      TreeNode& up = node_of(a);
      if (up.below_path.empty() || write.token > up.below) {
        up.below = write.token;
        up.below_path = t.path;
      }
      if (!listed(up)) {
        if (up.below_keys.size() < TreeNode::kBelowKeys) {
          up.below_keys.push_back({t.key, t.path});
        } else {
          up.more_keys = true;
        }
      }
    }
  }
  std::sort(after.begin(), after.end(),
            [](const auto& x, const auto& y) { return x.first < y.first; });
  for (auto& [i, node] : after) {
    const TreeNode* was = reads.nodes[i];
    if (was == nullptr || !(*was == node)) changes->nodes.emplace_back(paths[i], std::move(node));
  }
  return Status::Ok();
}

}  // namespace fencegate::storage
