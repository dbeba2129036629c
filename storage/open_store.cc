// OpenStore: the one factory that turns StoreOptions into an engine.

#include <memory>
#include <utility>

#include "storage/rocksdb_store.h"
#include "storage/token_store.h"

namespace fencegate::storage {

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
    status = Status::InvalidArgument("etcd engine is not built yet (planned)");
  } else {
    status = Status::InvalidArgument("unknown storage engine \"" +
                                     options.engine +
                                     "\" (expected rocksdb or etcd)");
  }
  if (error != nullptr) *error = status;
  return store;
}

}  // namespace fencegate::storage
