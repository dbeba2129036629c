#pragma once
// The store's options from the configuration, and the subcommands that
// work on a store without serving: `fencegate export`, `import` and
// `enter-tree` (storage/export_import.h, app/tree_entry.h). With rocksdb
// they open the data dir directly, so they run while fencegate is stopped;
// with etcd they run beside the replicas. Each Run* returns the process's
// exit code: 0 done, 1 the store failed or refused, 2 bad input.

#include <boost/asio/ssl/context.hpp>

#include <string>

#include "config/config.h"
#include "storage/token_store.h"

namespace fencegate::app {

// The store's options from the configuration: the etcd engine's password is
// read from its file here, and `etcd_tls` (https endpoints) is not owned.
// false + *error when the password cannot be read.
bool StoreOptionsOf(const config::Config& cfg, boost::asio::ssl::context* etcd_tls,
                    storage::StoreOptions* options, std::string* error);

// Where the store is, for messages: its directory, or etcd's endpoints.
std::string StoreWhere(const storage::StoreOptions& options);

int RunExport(const config::Config& cfg, const std::string& output);
int RunImport(const config::Config& cfg, const std::string& input);
int RunEnterTree(const config::Config& cfg, bool skip_unmapped);

}  // namespace fencegate::app
