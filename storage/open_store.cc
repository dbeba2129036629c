// OpenStore: the one factory that turns StoreOptions into an engine.

#include <memory>
#include <utility>

#include "storage/etcd_export.h"
#include "storage/etcd_store.h"
#include "storage/rocksdb_store.h"
#include "storage/token_store.h"

namespace fencegate::storage {

namespace {

std::unique_ptr<TokenStore> OpenEtcdStore(const EtcdStoreSettings& settings, Status* status) {
  std::unique_ptr<EtcdTransport> transport;
  *status = OpenEtcdTransport(settings, &transport);
  if (!status->ok()) return nullptr;
  EtcdStoreOptions store;
  store.prefix = settings.prefix;
  store.max_batch = settings.max_batch;
  store.decision_timeout = settings.decision_timeout;
  store.ownership = settings.ownership;
  return std::make_unique<EtcdStore>(std::move(transport), store);
}

}  // namespace

std::unique_ptr<TokenStore> OpenStore(const StoreOptions& options,
                                      Status* error) {
  Status status;
  std::unique_ptr<TokenStore> store;
  if (options.engine == "rocksdb") {
    RocksDbStoreOptions rocks;
    rocks.path = options.path;
    rocks.durability = options.durability;
    std::unique_ptr<RocksDbStore> engine;
    status = RocksDbStore::Open(rocks, &engine);
    if (status.ok()) store = std::move(engine);
  } else if (options.engine == "etcd") {
    store = OpenEtcdStore(options.etcd, &status);
  } else {
    status = Status::InvalidArgument("unknown storage engine \"" +
                                     options.engine +
                                     "\" (expected rocksdb or etcd)");
  }
  if (error != nullptr) *error = status;
  return store;
}

}  // namespace fencegate::storage
