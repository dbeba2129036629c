#include "app/store_tools.h"

#include <algorithm>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "app/tree_entry.h"
#include "config/secrets.h"
#include "fence/router.h"
#include "storage/export_import.h"
#include "tls/tls_context.h"

namespace fencegate::app {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitRuntime = 1;
constexpr int kExitConfig = 2;

void PrintStoreError(const char* what, const storage::StoreOptions& options,
                     const storage::Status& status) {
  std::cerr << "fencegate " << what << ": " << StoreWhere(options) << ": " << status.ToString()
            << "\n";
  if (status.code() == storage::Status::Code::kBusy && options.engine == "rocksdb") {
    std::cerr << "fencegate " << what
              << ": export, import and enter-tree open the token store directly; stop the "
                 "fencegate that uses it first\n";
  }
}

// The store's options for export and import, with the TLS context of https
// etcd endpoints in *etcd_tls. false + *error when either cannot be made.
bool ToolStoreOptions(const config::Config& cfg,
                      std::shared_ptr<boost::asio::ssl::context>* etcd_tls,
                      storage::StoreOptions* options, std::string* error) {
  if (cfg.storage.engine == "etcd" && cfg.storage.etcd.https) {
    *etcd_tls = tls::ClientContext(cfg.storage.etcd.tls, "storage.etcd.tls", cfg.source, error);
    if (!*etcd_tls) return false;
  }
  return StoreOptionsOf(cfg, etcd_tls->get(), options, error);
}

}  // namespace

int RunExport(const config::Config& cfg, const std::string& output) {
  storage::StoreOptions options;
  std::string options_error;
  std::shared_ptr<boost::asio::ssl::context> etcd_tls;
  if (!ToolStoreOptions(cfg, &etcd_tls, &options, &options_error)) {
    std::cerr << "fencegate export: " << options_error << "\n";
    return kExitRuntime;
  }
  std::ofstream file;
  if (output != "-") {
    file.open(output, std::ios::out | std::ios::trunc);
    if (!file) {
      std::cerr << "fencegate export: cannot write " << output << "\n";
      return kExitRuntime;
    }
  }
  std::ostream& out = output == "-" ? std::cout : file;
  storage::ExportSummary summary;
  storage::Status s = storage::ExportStore(options, out, &summary);
  if (!s.ok()) {
    PrintStoreError("export", options, s);
    return kExitRuntime;
  }
  std::cerr << "fencegate export: " << summary.keys << " keys and " << summary.paths
            << " paths of the tree from " << StoreWhere(options) << "\n";
  return kExitOk;
}

int RunImport(const config::Config& cfg, const std::string& input) {
  std::ifstream file;
  if (input != "-") {
    file.open(input);
    if (!file) {
      std::cerr << "fencegate import: cannot read " << input << "\n";
      return kExitConfig;
    }
  }
  std::istream& in = input == "-" ? std::cin : file;
  std::vector<storage::TokenRecord> records;
  // Everything is parsed before anything is applied: a bad line changes nothing.
  if (storage::Status s = storage::ReadRecords(in, &records); !s.ok()) {
    std::cerr << "fencegate import: " << (input == "-" ? "<stdin>" : input) << ": "
              << s.message() << "; nothing was imported\n";
    return kExitConfig;
  }
  storage::StoreOptions options;
  std::string options_error;
  std::shared_ptr<boost::asio::ssl::context> etcd_tls;
  if (!ToolStoreOptions(cfg, &etcd_tls, &options, &options_error)) {
    std::cerr << "fencegate import: " << options_error << "\n";
    return kExitRuntime;
  }
  // The store's own keys enter the tree first (as its next start would),
  // so that a file that says its keys entered it (the marker) cannot say
  // so of keys it did not bring.
  std::string route_error;
  const std::unique_ptr<proxy::Router> router = proxy::Router::Build(cfg.routes, &route_error);
  TreeEntryResult entry;
  if (storage::Status s = EnterTree(*router, options, TreeEntryMode{.mark_empty = false}, &entry);
      !s.ok() || !entry.refusal.empty()) {
    if (s.ok()) {
      std::cerr << "fencegate import: " << entry.refusal << "; nothing was imported\n";
    } else {
      PrintStoreError("import", options, s);
    }
    return kExitRuntime;
  }
  storage::Status status;
  std::unique_ptr<storage::TokenStore> store = storage::OpenStore(options, &status);
  if (!store) {
    PrintStoreError("import", options, status);
    return kExitRuntime;
  }
  storage::ImportSummary summary;
  storage::Status imported = storage::ImportTokens(*store, records, &summary);
  // A file from a fencegate without the tree (keys, and no marker): its
  // keys enter the tree as that fencegate's store would at its first start.
  const TreeEntryPlan plan = PlanFromRecords(*router, records);
  const bool store_entered = entry.plan.entered_before || entry.applied;
  storage::ImportSummary entered;
  if (imported.ok() && !plan.entered_before) {
    const bool mark = !store_entered && TreeEntryRefusal(plan).empty();
    imported = ApplyTreeEntry(*store, plan, mark, &entered);
  }
  storage::Status closed = store->Close();
  if (!imported.ok() || !closed.ok()) {
    PrintStoreError("import", options, imported.ok() ? closed : imported);
    std::cerr << "fencegate import: " << summary.records << " of " << records.size()
              << " records were applied before the error (tokens only go up; run the import "
                 "again)\n";
    return kExitRuntime;
  }
  std::cerr << "fencegate import: " << summary.records << " records into " << StoreWhere(options)
            << ": " << summary.at_imported << " now at the imported token, "
            << summary.already_higher << " already higher (kept); " << summary.paths
            << " paths of the tree\n";
  if (plan.entered_before || (plan.paths.empty() && plan.unmapped == 0)) return kExitOk;
  std::cerr << "fencegate import: the file holds keys without their paths: " << entered.paths
            << " of its " << plan.keys << " keys entered the tree of paths\n";
  if (plan.unmapped > 0 && !store_entered) {
    std::cerr << "fencegate import: warning: " << TreeEntryRefusal(plan)
              << "; until then fencegate does not start on this store\n";
  } else if (plan.unmapped > 0) {
    std::cerr << "fencegate import: " << plan.unmapped
              << " keys map back to no path and stay outside the tree\n";
  }
  return kExitOk;
}

// Enters the store's keys into the tree of paths whether or not that was
// done before.
int RunEnterTree(const config::Config& cfg, bool skip_unmapped) {
  storage::StoreOptions options;
  std::string error;
  std::shared_ptr<boost::asio::ssl::context> etcd_tls;
  if (!ToolStoreOptions(cfg, &etcd_tls, &options, &error)) {
    std::cerr << "fencegate enter-tree: " << error << "\n";
    return kExitRuntime;
  }
  const std::unique_ptr<proxy::Router> router = proxy::Router::Build(cfg.routes, &error);
  app::TreeEntryResult entry;
  storage::Status s = EnterTree(
      *router, options, TreeEntryMode{.force = true, .skip_unmapped = skip_unmapped}, &entry);
  if (!s.ok()) {
    PrintStoreError("enter-tree", options, s);
    return kExitRuntime;
  }
  if (!entry.refusal.empty()) {
    std::cerr << "fencegate enter-tree: " << entry.refusal << "\n";
    return kExitRuntime;
  }
  std::cerr << "fencegate enter-tree: " << entry.summary.paths << " of " << entry.plan.keys
            << " keys entered into the tree of paths at " << StoreWhere(options);
  if (entry.plan.unmapped > 0) {
    std::cerr << "; " << entry.plan.unmapped << " left outside it (they map back to no path)";
  }
  std::cerr << "\n";
  return kExitOk;
}

bool StoreOptionsOf(const config::Config& cfg, boost::asio::ssl::context* etcd_tls,
                    storage::StoreOptions* options, std::string* error) {
  options->engine = cfg.storage.engine;
  options->path = cfg.storage.path;
  options->durability = cfg.storage.durability == config::Durability::kSync
                            ? storage::Durability::kSync
                            : storage::Durability::kAsync;
  const config::EtcdConfig& etcd = cfg.storage.etcd;
  options->etcd.endpoints = etcd.endpoints;
  options->etcd.prefix = etcd.prefix;
  options->etcd.timeout = etcd.timeout;
  options->etcd.tls = etcd_tls;
  options->etcd.tls_server_name = etcd.tls.server_name;
  options->etcd.username = etcd.username;
  options->etcd.max_batch = etcd.max_batch;
  options->etcd.decision_timeout = etcd.decision_timeout;
  options->etcd.ownership = {.enabled = etcd.ownership.enabled,
                             .lease_ttl = etcd.ownership.lease_ttl,
                             .margin = etcd.ownership.margin,
                             .release_after = etcd.ownership.release_after,
                             .wait = etcd.ownership.wait,
                             .name = etcd.ownership.name};
  if (cfg.storage.engine == "etcd" && !etcd.password_file.empty()) {
    std::optional<std::string> password =
        config::ReadSecretFile(cfg.source, etcd.password_file, "storage.etcd.password_file", error);
    if (!password) return false;
    options->etcd.password = std::move(*password);
  }
  return true;
}

std::string StoreWhere(const storage::StoreOptions& options) {
  if (options.engine != "etcd") return options.path;
  std::string out;
  for (const std::string& e : options.etcd.endpoints) out += (out.empty() ? "" : ",") + e;
  return out;
}

}  // namespace fencegate::app
