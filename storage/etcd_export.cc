#include "storage/etcd_export.h"

#include <nlohmann/json.hpp>

#include <functional>
#include <utility>

#include "storage/etcd_client.h"

namespace fencegate::storage {

using nlohmann::json;

namespace {

// EtcdStore's transport: the client, as it is.
class ClientTransport : public EtcdTransport {
 public:
  explicit ClientTransport(std::unique_ptr<EtcdClient> client) : client_(std::move(client)) {}
  Status Call(std::string_view path, const json& request, json* response,
              bool retry_if_unknown, Deadline deadline) override {
    return client_->Call(path, request, response, retry_if_unknown, nullptr, deadline);
  }

 private:
  std::unique_ptr<EtcdClient> client_;
};

// The first key after every key that starts with prefix (etcd's range_end
// of a prefix); "\0" (to the end of the key space) when there is none.
std::string PrefixEnd(std::string prefix) {
  while (!prefix.empty()) {
    if (static_cast<unsigned char>(prefix.back()) < 0xff) {
      prefix.back() = static_cast<char>(prefix.back() + 1);
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');
}

// A string field of a gateway object ("" when absent or not a string).
std::string StringField(const json& object, const char* name) {
  auto it = object.find(name);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

Status NotARange(std::string_view what) {
  return Status::Corruption("etcd answered a range read without " + std::string(what));
}

}  // namespace

Status OpenEtcdTransport(const EtcdStoreSettings& settings, std::unique_ptr<EtcdTransport>* out) {
  EtcdClientOptions options;
  options.endpoints = settings.endpoints;
  options.request_timeout = settings.timeout;
  options.username = settings.username;
  options.password = settings.password;
  options.tls = settings.tls;
  options.tls_server_name = settings.tls_server_name;
  std::unique_ptr<EtcdClient> client;
  if (Status s = EtcdClient::Open(options, &client); !s.ok()) return s;
  *out = std::make_unique<ClientTransport>(std::move(client));
  return Status::Ok();
}

namespace {

// What WalkRange hands on for each key: its etcd key (for messages), the
// part after the range's base, and its value. Returns false to stop early,
// or an error in *error to stop with it.
using RawVisitor = std::function<bool(const std::string& etcd_key, std::string_view suffix,
                                      const std::string& value, Status* error)>;

// Every key under `base`, page by page at one revision (*revision: 0 reads
// the first page linearizably and sets it to that page's revision).
Status WalkRange(EtcdTransport& transport, const std::string& base, size_t page_keys,
                 int64_t* revision, const RawVisitor& visit) {
  if (page_keys == 0) return Status::InvalidArgument("a page of 0 keys");
  const std::string end64 = EtcdClient::Base64(PrefixEnd(base));
  const std::string limit = std::to_string(page_keys);
  std::string from = base;
  for (;;) {
    json request = {{"key", EtcdClient::Base64(from)}, {"range_end", end64}, {"limit", limit}};
    if (*revision != 0) request["revision"] = std::to_string(*revision);
    json response;
    // An offline tool: each page has the client's own timers only.
    if (Status s = transport.Call("/v3/kv/range", request, &response, /*retry_if_unknown=*/true,
                                  EtcdTransport::Deadline::max());
        !s.ok()) {
      return s;
    }
    if (!response.is_object()) return NotARange("an object");
    if (*revision == 0) {
      const json header = response.value("header", json::object());
      if (!EtcdClient::Int64Field(header, "revision", revision) || *revision <= 0) {
        return NotARange("a revision");
      }
    }
    const json kvs = response.value("kvs", json::array());
    if (!kvs.is_array()) return NotARange("a list of keys");
    std::string key;
    for (const json& kv : kvs) {
      std::string value;
      if (!kv.is_object() || !EtcdClient::FromBase64(StringField(kv, "key"), &key) ||
          !EtcdClient::FromBase64(StringField(kv, "value"), &value)) {
        return NotARange("keys and values in Base64");
      }
      if (key.compare(0, base.size(), base) != 0 || key < from) {
        return NotARange("its keys in the range asked, in order (etcd key '" + PrintableKey(key) + "')");
      }
      Status error;
      const bool go_on = visit(key, std::string_view(key).substr(base.size()), value, &error);
      if (!error.ok()) return error;
      if (!go_on) return Status::Ok();
    }
    auto more = response.find("more");  // left out when false
    if (more == response.end() || !more->is_boolean() || !more->get<bool>()) return Status::Ok();
    if (kvs.empty()) return NotARange("keys although it says there are more");
    from = key;
    from.push_back('\0');  // the first key after the last one read
  }
}

}  // namespace

Status ForEachEtcdToken(EtcdTransport& transport, std::string_view prefix, size_t page_keys,
                        const EtcdTokenVisitor& visit, int64_t* revision) {
  int64_t own = 0;
  return WalkRange(
      transport, std::string(prefix) + "t/", page_keys, revision != nullptr ? revision : &own,
      [&visit](const std::string& key, std::string_view token_key, const std::string& value,
               Status* error) {
        if (token_key.empty() || token_key.size() > EtcdStore::kMaxKeyBytes) {
          *error = Status::Corruption("etcd key '" + PrintableKey(key) + "' holds no token's key (" +
                                      std::to_string(token_key.size()) +
                                      " bytes after the prefix, expected 1 to 1024)");
          return false;
        }
        uint64_t token = 0;
        if (!EtcdStore::DecodeToken(value, &token)) {
          *error = Status::Corruption("etcd key '" + PrintableKey(key) + "' holds '" + PrintableKey(value) +
                                      "', not a token (20 decimal digits)");
          return false;
        }
        return visit(std::string(token_key), token);
      });
}

Status ForEachEtcdNode(EtcdTransport& transport, std::string_view prefix, size_t page_keys,
                       int64_t revision, const EtcdNodeVisitor& visit) {
  TreeNode node;
  return WalkRange(
      transport, std::string(prefix) + "n/", page_keys, &revision,
      [&](const std::string& key, std::string_view path, const std::string& value,
          Status* error) {
        if (!IsTreePath(path) || !DecodeTreeNode(value, &node)) {
          *error = Status::Corruption("etcd key '" + PrintableKey(key) +
                                      "' holds no node of the tree of paths");
          return false;
        }
        return visit(std::string(path), node);
      });
}

}  // namespace fencegate::storage
