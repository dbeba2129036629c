// OpenStore: the one factory that turns StoreOptions into an engine.

#include <memory>
#include <utility>

#include "storage/etcd_client.h"
#include "storage/etcd_store.h"
#include "storage/rocksdb_store.h"
#include "storage/token_store.h"

namespace fencegate::storage {

namespace {

// EtcdStore's transport: the client, as it is.
class ClientTransport : public EtcdTransport {
 public:
  explicit ClientTransport(std::unique_ptr<EtcdClient> client) : client_(std::move(client)) {}
  Status Call(std::string_view path, const nlohmann::json& request, nlohmann::json* response,
              bool retry_if_unknown) override {
    return client_->Call(path, request, response, retry_if_unknown);
  }

 private:
  std::unique_ptr<EtcdClient> client_;
};

std::unique_ptr<TokenStore> OpenEtcdStore(const EtcdStoreSettings& settings, Status* status) {
  EtcdClientOptions options;
  options.endpoints = settings.endpoints;
  options.request_timeout = settings.timeout;
  options.username = settings.username;
  options.password = settings.password;
  options.tls = settings.tls;
  options.tls_server_name = settings.tls_server_name;
  std::unique_ptr<EtcdClient> client;
  *status = EtcdClient::Open(options, &client);
  if (!status->ok()) return nullptr;
  EtcdStoreOptions store;
  store.prefix = settings.prefix;
  return std::make_unique<EtcdStore>(std::make_unique<ClientTransport>(std::move(client)), store);
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
