#pragma once
// Reading a route's `idempotency:` field (docs/contract.md, "Idempotency
// keys"). Internal to config/.

#include <optional>
#include <vector>

#include "config/config.h"
#include "config/yaml_reader.h"

namespace fencegate::config::internal {

// Reads `idempotency:` in either form: `off`, a window (`24h`), or the
// mapping of window, header, required, scope, concurrent,
// max_response_bytes and in_flight_timeout. Sets *out (nullopt for off) and
// *scope_field to the scope's field when one is given: the scope is a key
// template, checked by the route once it knows its regex's groups.
bool ReadIdempotency(YamlReader& r, const Field& f, std::optional<IdempotencyConfig>* out,
                     std::optional<Field>* scope_field);

}  // namespace fencegate::config::internal
