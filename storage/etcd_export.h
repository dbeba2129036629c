#pragma once
// Reading every token and every node of the tree of paths of the etcd
// engine, for `fencegate export`: the keys under `<prefix>t/` and
// `<prefix>n/` exactly as EtcdStore writes them (etcd_store.h), page by
// page, never in one unbounded read.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "storage/etcd_store.h"
#include "storage/token_store.h"
#include "storage/tree.h"

namespace fencegate::storage {

// An EtcdTransport on a new EtcdClient for settings (endpoints, timeout,
// user, TLS). InvalidArgument as EtcdClient::Open.
Status OpenEtcdTransport(const EtcdStoreSettings& settings, std::unique_ptr<EtcdTransport>* out);

// Calls visit(key, token) for every token under `<prefix>t/`, in byte order
// of the keys, as of one revision: the first page is a linearizable range
// read of at most page_keys keys (etcd's default consistency), each next
// page starts just after the last key read and reads at the first page's
// revision. Stops early (still ok) when visit returns false. Blocks on the
// network: for offline tools, not for a store's lane or an I/O thread.
//
// Errors: the transport's (Unavailable while etcd does not answer;
// InvalidArgument when etcd compacted that revision meanwhile: export
// again); InvalidArgument for page_keys 0; Corruption naming the etcd key
// for a value that is not a token (20 digits), for a key that cannot be a
// token's key (empty, or longer than EtcdStore::kMaxKeyBytes), and for an
// answer that is not a range.
//
// revision: nullptr, or in and out: 0 on the way in reads as above and
// sets it to the revision read at; otherwise every page reads at it.
using EtcdTokenVisitor = std::function<bool(const std::string& key, uint64_t token)>;
Status ForEachEtcdToken(EtcdTransport& transport, std::string_view prefix, size_t page_keys,
                        const EtcdTokenVisitor& visit, int64_t* revision = nullptr);

// Calls visit(path, node) for every node of the tree of paths under
// `<prefix>n/`, in byte order of the paths, as ForEachEtcdToken, at
// `revision` (0: the latest, linearizably). A key that is not a tree path
// or a value that is not a node is Corruption naming the etcd key.
using EtcdNodeVisitor = std::function<bool(const std::string& path, const TreeNode& node)>;
Status ForEachEtcdNode(EtcdTransport& transport, std::string_view prefix, size_t page_keys,
                       int64_t revision, const EtcdNodeVisitor& visit);

}  // namespace fencegate::storage
