#pragma once
// Reading the `routes:` list (docs/contract.md, "Keys and canonical paths"
// and "Configuration"). Internal to config/.

#include <vector>

#include "config/config.h"
#include "config/yaml_reader.h"

namespace fencegate::config::internal {

// Reads and validates every route: exactly one of path_prefix/path_regex,
// methods, key template, mode, idempotency; names default to "route-<i>"
// and must be unique. Returns false with the reader's error set.
bool ReadRoutes(YamlReader& reader, const Field& field, std::vector<RouteConfig>* routes);

}  // namespace fencegate::config::internal
