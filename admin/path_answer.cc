#include "admin/path_answer.h"

#include <memory>
#include <utility>

namespace fencegate::proxy {

using nlohmann::json;

namespace {

// The reads of ReadPathNodes, one at a time.
struct PathRead : std::enable_shared_from_this<PathRead> {
  storage::TokenStore* store = nullptr;
  std::vector<std::string> paths;
  PathNodes nodes;
  std::function<void(const storage::Status&, PathNodes)> done;

  void Next() {
    if (nodes.size() == paths.size()) return done(storage::Status::Ok(), std::move(nodes));
    store->GetNode(paths[nodes.size()], [self = shared_from_this()](
                                            const storage::Status& st,
                                            std::optional<storage::TreeNode> node) {
      if (!st.ok()) return self->done(st, {});
      self->nodes.push_back(std::move(node));
      self->Next();
    });
  }
};

}  // namespace

void ReadPathNodes(storage::TokenStore& store, std::string path,
                   std::function<void(const storage::Status&, PathNodes)> done) {
  auto read = std::make_shared<PathRead>();
  read->store = &store;
  for (std::string_view a : storage::TreeAncestors(path)) read->paths.emplace_back(a);
  read->paths.push_back(std::move(path));
  read->done = std::move(done);
  read->Next();
}

std::optional<json> PathJson(std::string_view path, const PathNodes& nodes) {
  const storage::TreePathViews ancestors = storage::TreeAncestors(path);
  json above = nullptr;
  for (size_t i = 0; i < ancestors.size() && i < nodes.size(); ++i) {
    const std::optional<storage::TreeNode>& n = nodes[i];
    if (!n || !n->subtree_written) continue;
    if (above.is_null() || n->subtree > above["token"].get<uint64_t>()) {
      above = {{"path", ancestors[i]}, {"token", n->subtree}};
    }
  }
  const std::optional<storage::TreeNode>& own =
      nodes.size() == ancestors.size() + 1 ? nodes.back() : std::nullopt;
  if (!own && above.is_null()) return std::nullopt;
  json out = {{"path", path}, {"above", above}};
  const storage::TreeNode node = own.value_or(storage::TreeNode{});
  out["fenced"] = node.fenced;
  out["key"] = node.fenced ? json(node.key) : json(nullptr);
  out["token"] = node.fenced ? json(node.token) : json(nullptr);
  out["subtree_token"] = node.subtree_written ? json(node.subtree) : json(nullptr);
  out["below"] = node.below_path.empty()
                     ? json(nullptr)
                     : json{{"path", node.below_path}, {"token", node.below}};
  json keys = json::array();
  for (const storage::TreeNode::Below& b : node.below_keys) {
    keys.push_back({{"key", b.key}, {"path", b.path}});
  }
  out["keys_below"] = std::move(keys);
  out["more_keys_below"] = node.more_keys;
  return out;
}

}  // namespace fencegate::proxy
