#pragma once
// What a reload may not change. A running fencegate applies a new
// configuration in place (SIGHUP, POST /v1/reload): routes, fencing,
// timeouts, most limits, the admin token and the log settings. The fields
// below are bound at start (listening sockets, the store, the threads, the
// upstream pool's address and TLS) and change only with a restart; a reload
// that changes any of them is refused whole.

#include <string>
#include <vector>

#include "config/config.h"

namespace fencegate::config {

// One message per restart-only field that differs between `running` and
// `next`, in the order of the file's sections, e.g.
// "storage.path changes only with a restart". Empty: `next` may be applied
// in place. Derived fields are compared through the field they come from.
std::vector<std::string> RestartOnlyChanges(const Config& running, const Config& next);

}  // namespace fencegate::config
