#pragma once
// TokenStore: the persistent map key -> highest accepted fencing token.
//
// The proxy knows storage only through this header (no engine types leak).
// All operations are asynchronous: the caller passes a handler that the store
// invokes exactly once, on a thread owned by the store, or on the caller's
// thread before the call returns: for an immediate error such as a store that
// is shutting down, and for an answer the engine can give without waiting for
// I/O (the RocksDB engine under async durability, rocksdb_store.h). So a
// caller must not hold, across the call, a lock its handler takes. Callers
// that need to continue on their own executor post from inside the handler.
// No operation ever blocks the caller on disk or network I/O, so an Asio I/O
// thread may call any of them.
//
// All methods are thread-safe.
//
// Order. Advance, AdvanceAll and Raise calls are decided in the order they
// were made: when one call returns before another starts, the first is
// decided (checked against, and applied to, the stored value) first,
// whatever the keys and whenever the handlers run. The fence filter relies
// on it: it enqueues the Advance of a write that waits for its key's turn
// behind another write, and the store must judge the two in that order (an
// engine answering in parallel would have to keep each key's calls in
// order). An engine whose replicas own keys (Forwardable) keeps the order
// of the calls that share a key; a call that waits for another replica to
// give its key up lets calls of other keys be decided meanwhile.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "storage/status.h"
#include "storage/tree.h"

namespace boost::asio::ssl {
class context;
}  // namespace boost::asio::ssl

namespace fencegate::storage {

// Outcome of Advance/Raise when the Status is ok.
struct Fence {
  bool accepted = false;  // Advance: token >= stored. Raise: always true.
  uint64_t current = 0;   // the stored maximum after the operation
  // An engine whose replicas own keys (TokenStore::Forwardable): the
  // ownership this replica held the key under when it decided; 0 = none.
  int64_t owner = 0;
};

// One item of AdvanceAll: a key and the token it is fenced with.
struct KeyToken {
  std::string key;
  uint64_t token = 0;
};

// Outcome of AdvanceAll when the Status is ok.
struct BatchFence {
  bool accepted = false;          // every item's token >= its stored value
  std::vector<uint64_t> current;  // per item: stored maximum after the op (or at refusal)
  size_t stale = SIZE_MAX;        // when refused: index of the first item whose token < stored
  int64_t owner = 0;              // as Fence::owner, for every key
};

// Most items one AdvanceAll takes: a write names a handful of keys (COPY and
// MOVE two); the bound keeps one request from holding the store's writer
// for long.
inline constexpr size_t kMaxBatchItems = 64;

// Token keys may not begin with a NUL byte and then 'i' or 't': an engine
// keeps its own records beside the tokens under keys that do, idempotency
// records (idempotency_store.h) after a NUL and 'i', the nodes of the tree
// of paths (tree.h) after a NUL and 't'. Every engine refuses such a token
// key, so that all behave alike. (The lock service keeps its counters
// under "\0locks/", lock_service.h.)
inline constexpr std::string_view kRecordKeyPrefix{"\0i", 2};
inline bool IsRecordKey(std::string_view key) { return key.starts_with(kRecordKeyPrefix); }
inline constexpr std::string_view kTreeKeyPrefix{"\0t", 2};
inline bool IsTreeKey(std::string_view key) { return key.starts_with(kTreeKeyPrefix); }
inline std::string TreeKeyOf(std::string_view path) {
  std::string k(kTreeKeyPrefix);
  k.append(path);
  return k;
}
// A token key like any other, which a store holds once its keys have been
// entered into the tree of paths (app/tree_entry.h). It sorts before every
// other key, so a scan of the keys meets it first; export carries it, so a
// file says whether its keys entered the tree.
inline constexpr std::string_view kTreeEnteredKey{"\0!tree-entered", 14};

// A key (or any bytes) for a message: printable ASCII as it is, other
// bytes and the backslash as \xNN, at most `max` bytes and then "...".
std::string PrintableKey(std::string_view bytes, size_t max = 256);

// What every engine refuses of one key: longer than max_key_bytes, or
// beginning as the store's own records do. InvalidArgument naming it, or ok.
Status CheckTokenKey(std::string_view key, size_t max_key_bytes);

// What every engine refuses in AdvanceAll, before deciding anything: no item
// or more than kMaxBatchItems, an empty key or one CheckTokenKey refuses, a
// key named twice. InvalidArgument naming the problem, or
// ok.
Status CheckBatchItems(const std::vector<KeyToken>& items, size_t max_key_bytes);

// What every engine refuses in AdvanceTree, before deciding anything: keys
// as CheckBatchItems would (none is allowed: a write with only uncovered
// targets), no target or more than two, a path longer than max_key_bytes.
// DecideTree refuses the rest (tree.h).
Status CheckTreeWrite(const TreeWrite& write, size_t max_key_bytes);

class IdempotencyStore;

// What an engine counted since it opened, for the metrics endpoint; each
// count only grows. The optional ones are counted only by an engine that
// has such an event (the RocksDB engine's fsync and reopen).
// What an engine whose replicas own keys (TokenStore::Forwardable) counted.
struct OwnershipCounters {
  uint64_t keys_owned = 0;  // now: keys (and collections) this replica owns
  uint64_t takes = 0;       // keys taken: owned by no replica, then by this one
  uint64_t releases = 0;    // keys given up once no write of theirs was left here
  uint64_t lost = 0;        // keys lost with an ownership that lapsed
  uint64_t waits = 0;       // writes that waited for another replica to give up a key
};

struct StoreCounters {
  uint64_t requests = 0;     // write requests decided (Advance, AdvanceAll, Raise, records)
  uint64_t batches = 0;      // group commits: the decisions written together, one write each
  uint64_t writes = 0;       // records written (accepted changes)
  uint64_t write_errors = 0; // writes that failed (each refused its batch: 503)
  std::optional<uint64_t> syncs;       // durable writes (fsync) that succeeded
  std::optional<uint64_t> recoveries;  // the engine recovered from a failed write
  std::optional<OwnershipCounters> ownership;  // an engine whose replicas own keys
};

class TokenStore {
 public:
  using FenceHandler = std::function<void(const Status&, Fence)>;
  using BatchFenceHandler = std::function<void(const Status&, BatchFence)>;
  using GetHandler = std::function<void(const Status&, std::optional<uint64_t>)>;
  using TreeHandler = std::function<void(const Status&, TreeVerdict)>;
  using NodeHandler = std::function<void(const Status&, std::optional<TreeNode>)>;

  virtual ~TokenStore() = default;

  // Atomic check-and-advance for one key. If the key is absent or
  // token >= stored, stores max(stored, token) and reports
  // {accepted=true, current=max}; otherwise stores nothing and reports
  // {accepted=false, current=stored}. With sync durability the new value is
  // in the fsynced WAL before the handler runs (group commit: concurrent
  // advances share one fsync). On a non-ok Status the Fence is meaningless:
  // the caller must treat the write as refused (fail closed). The stored
  // value never decreases, under any interleaving of callers.
  virtual void Advance(std::string key, uint64_t token, FenceHandler handler) = 0;

  // Atomic check-and-advance for several keys, all or nothing: if every
  // item's key is absent or its token >= stored, stores max(stored, token)
  // for every item in one atomic write (same durability and group commit as
  // Advance) and reports {accepted=true, current[i]=new maximum of item i};
  // otherwise stores nothing and reports {accepted=false, current[i]=stored
  // value of item i (0 when absent), stale=index of the first item whose
  // token < stored}. The whole call is one decision in the call order (see
  // Order): it sees every earlier call and every later call sees all of it.
  // Items that CheckBatchItems refuses answer InvalidArgument, nothing
  // stored. On a non-ok Status the BatchFence is meaningless: nothing may be
  // forwarded (fail closed).
  virtual void AdvanceAll(std::vector<KeyToken> items, BatchFenceHandler handler) = 0;

  // Atomic check-and-advance of a write over the tree of paths
  // (docs/contract.md, "Nested resources"): reads the write's keys and the
  // nodes of its targets and their ancestors, decides by DecideTree (tree.h),
  // and when accepted stores the keys' new tokens and the changed nodes in
  // one atomic write (durability and group commit as Advance). One decision
  // in the call order, as AdvanceAll. What CheckTreeWrite or DecideTree
  // refuses as malformed answers InvalidArgument, nothing stored; a node
  // that does not decode, Corruption. On a non-ok Status the verdict is
  // meaningless: nothing may be forwarded. An engine that keeps no tree
  // answers Unavailable.
  virtual void AdvanceTree(TreeWrite write, TreeHandler handler);

  // Reads the node of a canonical path; nullopt when the tree has none.
  virtual void GetNode(std::string path, NodeHandler handler);

  // Administrative raise: stores max(stored, token), never refuses, never
  // lowers. Reports {accepted=true, current=new maximum}. Same durability.
  virtual void Raise(std::string key, uint64_t token, FenceHandler handler) = 0;

  // Reads the stored maximum; nullopt when the key was never seen.
  virtual void Get(std::string key, GetHandler handler) = 0;

  // The engine's idempotency records (idempotency_store.h), or nullptr for
  // an engine that keeps none. The pointer lives as long as the store.
  virtual IdempotencyStore* Idempotency() { return nullptr; }
  // A snapshot of the engine's counters, or nullopt for an engine that keeps
  // none. Thread-safe, never blocks on I/O.
  virtual std::optional<StoreCounters> Counters() const { return std::nullopt; }

  // Replicas that share one fence and own its keys (the etcd engine with
  // storage.etcd.ownership, etcd_store.h): whether a write decided under
  // `owner` (Fence::owner) may be forwarded now, that is whether that
  // ownership is still this replica's, by its own clock, with a margin.
  // Always true for owner 0. Thread-safe; never blocks.
  virtual bool Forwardable(int64_t owner) const {
    (void)owner;
    return true;
  }
  // No write of `key` (a key, or a TreeQueueName) is left on this replica:
  // an engine whose replicas own keys may give it up. Thread-safe; never
  // blocks; called under the key queue's lock.
  virtual void Disown(std::string_view key) { (void)key; }
  // Whether Disown does anything (the key queue calls it only then).
  virtual bool OwnsKeys() const { return false; }

  // Cheap readiness probe: ok while the store can serve reads and writes.
  // Does not block on I/O (reports the last known state).
  virtual Status Health() const = 0;

  // Blocks until every acknowledged advance is durable, then returns. Called
  // at shutdown from a non-I/O thread. After Close() further operations fail
  // with Unavailable.
  virtual Status Close() = 0;
};

enum class Durability { kSync, kAsync };

// Key ownership between replicas (storage.etcd.ownership, etcd_store.h).
struct EtcdOwnership {
  bool enabled = true;
  std::chrono::milliseconds lease_ttl{5000};  // the replica's etcd lease
  // A write is forwarded only while the lease has at least this left, by
  // the replica's own clock.
  std::chrono::milliseconds margin{1000};
  // A key is given up once no write of it is left here and another replica
  // waits for it, or once none has been left here for this long.
  std::chrono::milliseconds release_after{30000};
  // How long a write waits for another replica to give its key up.
  std::chrono::milliseconds wait{3000};
  std::string name;  // the replica's name in etcd; "" = host name and process id
};

// The etcd engine's settings (storage.etcd, etcd_store.h).
struct EtcdStoreSettings {
  std::vector<std::string> endpoints;
  std::string prefix = "fencegate/";
  std::chrono::milliseconds timeout{2000};  // one request to one member
  std::string username;                     // "" = no authentication
  std::string password;
  // The TLS context of https endpoints; not owned, outlives the store.
  boost::asio::ssl::context* tls = nullptr;
  std::string tls_server_name;  // "" = each endpoint's host
  size_t max_batch = 40;        // keys per transaction (EtcdStoreOptions::max_batch)
  // A call's whole decision, queued to answered (EtcdStoreOptions).
  std::chrono::milliseconds decision_timeout{5000};
  EtcdOwnership ownership;
};

struct StoreOptions {
  std::string engine = "rocksdb";  // "rocksdb" (embedded) | "etcd"
  std::string path = "./fencegate-data";  // rocksdb
  Durability durability = Durability::kSync;  // rocksdb
  EtcdStoreSettings etcd;  // etcd
};

// Opens the engine that options name. On failure returns nullptr and sets
// *error (for example: data dir locked by another process, unreadable,
// corrupt, or an engine that is not built).
std::unique_ptr<TokenStore> OpenStore(const StoreOptions& options, Status* error);

}  // namespace fencegate::storage
