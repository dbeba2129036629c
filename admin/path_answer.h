#pragma once
// The admin listener's answer about one path of the tree of paths
// (docs/contract.md, "Nested resources" and "Admin API"): what the store
// keeps for it and what bears on a write to it, read node by node from the
// root down (a path's ancestors, then the path).

#include <nlohmann/json.hpp>

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "storage/token_store.h"

namespace fencegate::proxy {

// The nodes of `path`'s ancestors, root first, then of `path`: nullopt
// where the tree has none.
using PathNodes = std::vector<std::optional<storage::TreeNode>>;

// Reads them one after the other; `done` runs once, on a store thread (or
// before ReadPathNodes returns), with the first error or every node.
void ReadPathNodes(storage::TokenStore& store, std::string path,
                   std::function<void(const storage::Status&, PathNodes)> done);

// {"path", "fenced", "key", "token", "subtree_token", "above", "below",
// "keys_below", "more_keys_below"}; nullopt when nothing in the tree bears
// on the path (no node of its own, no subtree write above it).
std::optional<nlohmann::json> PathJson(std::string_view path, const PathNodes& nodes);

}  // namespace fencegate::proxy
