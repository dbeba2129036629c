#pragma once
// EtcdStore: the token store kept in etcd (storage.engine: etcd), so that
// several fencegate replicas share one fence. Keys live under the
// configured prefix as `<prefix>t/<key>`, each value the token as 20
// decimal digits, so that etcd's byte-wise comparison of values orders
// tokens as numbers.
//
// One check-and-advance is one nested transaction: if the key was never
// created, put; else if its value is lower, put; else read it back (etcd's
// comparison of a missing key's value is false, hence the first branch on
// its create revision). Group commit: the calls queued while a
// transaction is at etcd go together in the next one, one nested
// transaction per key, so throughput is etcd's commit rate times the
// batch, not one round trip per write. Reads are linearizable (etcd's
// default range).
//
// Threads: one lane thread decides every call, in the order the calls were
// made (token_store.h, "Order"), and runs the handlers. It is the only
// user of the transport. A batch holds each key once: a key queued twice
// ends the batch, so that the second call sees the first.
//
// The tree of paths (tree.h) lives under `<prefix>n/<path>`, one node a
// key, its value the node's record. Tree writes queued one after the other
// are decided together: every token and node they need is read in one
// transaction, they are decided in order by DecideTree, and what they
// change is written in one transaction that compares the modification
// revision of everything read; when another replica changed one of them
// meanwhile, all are read and decided again. A batch reads at most 128
// keys (etcd's default --max-txn-ops), and so writes and compares no more.
//
// Idempotency records (idempotency_store.h) live under `<prefix>i/<key>`,
// each decided as the other engines decide it (DecideReserve and the
// rest, on the bytes read) and written only if the record's modification
// revision is still the one read: a compare-and-set, read again when
// another replica changed it meanwhile. Each record is put with a lease
// that ends at most a minute after the record expires (one lease per
// minute of expiry, shared by its records), so etcd drops expired
// records by itself; until it has, they are treated as absent, as the
// caller's clock says.
//
// Ownership (storage.etcd.ownership; docs/contract.md, "Replicas"): at most
// one replica forwards a key's writes at a time. Each replica holds one
// etcd lease, kept alive by the lane. Owning key k is the etcd key
// `<prefix>o/k/<k>` put with that lease, taken in the same transaction
// that checks and advances k's token, which succeeds only when k has no
// owner or this one. A write decided so carries the lease
// (Fence::owner), and the proxy forwards it only while the lease has more
// than the margin left by this host's clock (Forwardable): etcd ends a
// lease no sooner than its TTL after the keep-alive that was sent last, so
// by then this replica has stopped. When no write of k is left here
// (Disown) for release_after, the lane deletes the owner key (one
// transaction for many keys). A write whose key another replica owns waits
// in the lane, tried again every few milliseconds, in order behind it
// every later call of its keys, until the owner gives it up or its lease
// ends, and then at most `wait`: answered Moving. The tree's writes own
// their keys and, for a target under nesting: shared, its first segment
// (`<prefix>o/p/<seg>`, "/" for the root's own node); a subtree write of
// the root owns `<prefix>o/s` and needs every first segment free or its
// own. Closing revokes the lease: the keys pass at once.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "storage/idempotency_store.h"
#include "storage/token_store.h"

namespace fencegate::storage {

// How EtcdStore talks to etcd: a v3 JSON gateway call (`path` such as
// "/v3/kv/txn"), blocking, from the lane thread only. `retry_if_unknown`:
// the call may be sent again when its outcome is unknown (every call the
// store makes is safe to repeat: an advance that already happened is
// accepted again with the same token). `deadline`: the call ends by then,
// answered or not (Unavailable), whatever its own timers would allow.
// Implemented by EtcdClient; tests may wrap it.
class EtcdTransport {
 public:
  using Deadline = std::chrono::steady_clock::time_point;
  virtual ~EtcdTransport() = default;
  virtual Status Call(std::string_view path, const nlohmann::json& request,
                      nlohmann::json* response, bool retry_if_unknown, Deadline deadline) = 0;
};

struct EtcdStoreOptions {
  std::string prefix = "fencegate/";
  // Keys per transaction, at least 1: each key is a nested transaction of
  // up to three operations, and etcd allows 128 operations in one
  // (--max-txn-ops). 1 = one transaction per call.
  size_t max_batch = 40;
  // How long a call may wait for its decision, from the moment it is
  // queued: its turn on the lane and every etcd call it takes. Past it,
  // the call is answered Unavailable, tried or not.
  std::chrono::milliseconds decision_timeout{5000};
  EtcdOwnership ownership;  // enabled: false = every replica forwards what it accepted
};

class EtcdStore : public TokenStore, public IdempotencyStore {
 public:
  static constexpr size_t kMaxKeyBytes = 1024;

  EtcdStore(std::unique_ptr<EtcdTransport> transport, EtcdStoreOptions options);
  ~EtcdStore() override;

  void Advance(std::string key, uint64_t token, FenceHandler handler) override;
  // All or nothing: the keys are read, then written in one transaction that
  // compares each key's modification revision with what was read; when
  // another replica changed one meanwhile, read again and decide again.
  void AdvanceAll(std::vector<KeyToken> items, BatchFenceHandler handler) override;
  void Raise(std::string key, uint64_t token, FenceHandler handler) override;
  void Get(std::string key, GetHandler handler) override;
  void AdvanceTree(TreeWrite write, TreeHandler handler) override;
  void GetNode(std::string path, NodeHandler handler) override;
  IdempotencyStore* Idempotency() override { return this; }
  void ReserveKey(std::string key, IdempotencyRecord reservation,
                  ReserveHandler handler) override;
  void FinishKey(std::string key, IdempotencyRecord finished, int64_t now_ms,
                 ChangeHandler handler) override;
  void ReleaseKey(std::string key, uint64_t owner, ChangeHandler handler) override;
  void RenewKey(std::string key, uint64_t owner, int64_t expires_ms, int64_t now_ms,
                ChangeHandler handler) override;
  void LookupKey(std::string key, int64_t now_ms, LookupHandler handler) override;
  // The result of the last call to etcd (or of the lane's probe while
  // idle, every probe_interval): Unavailable while etcd does not answer.
  Status Health() const override;
  // Write requests decided, transactions that wrote them (a batch of
  // single-key calls is one), keys written and failed write transactions.
  std::optional<StoreCounters> Counters() const override;
  // Decides what is queued, then stops the lane (revoking the ownership
  // lease). Idempotent.
  Status Close() override;
  bool Forwardable(int64_t owner) const override;
  void Disown(std::string_view key) override;
  bool OwnsKeys() const override { return options_.ownership.enabled; }

  // The token as etcd stores it (20 digits), and back (false unless
  // exactly 20 digits).
  static std::string EncodeToken(uint64_t token);
  static bool DecodeToken(std::string_view text, uint64_t* token);

 private:
  using Deadline = EtcdTransport::Deadline;
  struct Single {  // Advance, Raise or Get
    enum class Kind { kAdvance, kRaise, kGet } kind;
    std::string key;
    uint64_t token = 0;
    FenceHandler fence;
    GetHandler get;
    Deadline deadline{};  // set by Enqueue: its decision_timeout
    Deadline moving_until{};  // set when it first waits for another replica's key
  };
  struct Several {
    std::vector<KeyToken> items;
    BatchFenceHandler handler;
    Deadline deadline{};
    Deadline moving_until{};
  };
  struct Record {  // an idempotency record's call
    enum class Kind { kReserve, kFinish, kRelease, kRenew, kLookup } kind = Kind::kLookup;
    std::string key;
    IdempotencyRecord record;  // kReserve, kFinish
    int64_t now_ms = 0;        // kFinish, kLookup (kReserve: record.created_ms)
    uint64_t owner = 0;        // kRelease, kRenew
    ReserveHandler reserve;
    ChangeHandler change;
    LookupHandler lookup;
    Deadline deadline{};
    Deadline moving_until{};  // unused: records are never another replica's
  };
  struct Tree {  // AdvanceTree, or a GetNode (no targets: write.keys[0] is the path)
    TreeWrite write;
    TreeHandler handler;
    NodeHandler node;
    Deadline deadline{};
    Deadline moving_until{};
  };
  using Call = std::variant<Single, Several, Record, Tree>;

  // Most keys a batch of tree writes reads (and so writes and compares).
  static constexpr size_t kMaxTreeReads = 128;

  void Enqueue(Call call);
  // Answers a call that will not run with `status`.
  static void Answer(Call& call, const Status& status);
  // Lane: true (and the call answered Unavailable) when its deadline has
  // passed; otherwise false, and call_deadline_ is at most its deadline.
  bool Expired(Call& call);
  // Removes (answering them) the calls of a batch whose deadline passed,
  // and sets call_deadline_ to the earliest of the others'.
  template <typename T>
  void DropExpired(std::vector<T>& batch);
  // transport_->Call with call_deadline_: every etcd call of a decision.
  Status CallEtcd(std::string_view path, const nlohmann::json& request, nlohmann::json* response,
                  bool retry_if_unknown);
  void Lane();
  void RunBatch(std::vector<Single>& batch);
  void RunSeveral(Several& call);
  // `again`: a second try after an owner key assumed to be this replica's
  // was not (read this time).
  void RunTrees(std::vector<Tree>& batch, bool again = false);  // etcd_tree.cc
  void RunNodeRead(Tree& call);             // etcd_tree.cc
  std::string NodeKeyOf(std::string_view path) const;
  // Corruption: etcd's answer is not `what` it should be.
  static Status Malformed(std::string_view what);
  static Record NewRecord(Record::Kind kind, std::string key);
  void RunRecord(Record& call);  // etcd_records.cc
  // A lease that ends at least a minute after expires_ms (and at most two);
  // 0 with *status on failure.
  int64_t LeaseFor(int64_t expires_ms, int64_t now_ms, Status* status);
  void Probe();
  void SetHealth(const Status& status);

  // Ownership (etcd_ownership.cc). Lane only, unless said.
  using Clock = std::chrono::steady_clock;
  std::string OwnerKeyOf(std::string_view key) const;
  // The deadline of the lane's own calls, from when they start.
  Clock::duration BackgroundTimeout() const;
  // Whether a key's writes are forwarded, and so owned: not fencegate's own
  // keys, which begin with a NUL byte (the lock service's counters under
  // "\0locks/", the tree's entry mark), whose writes go nowhere.
  static bool Forwarded(std::string_view key) { return key.empty() || key.front() != '\0'; }
  // The owner keys a tree write needs (`owned`) and must find free or its
  // own (`checked`, subtree writes of the root: the range of first
  // segments, as its first key and range end).
  void TreeOwners(const TreeWrite& write, std::vector<std::string>* owned,
                  std::vector<std::string>* checked) const;
  // The lease, granted if there is none: its id, or 0 with *status.
  int64_t EnsureLease(Status* status);
  // Keep-alive when due; wants put and taken back; others' wants polled;
  // idle keys released (wanted, or idle for release_after).
  void Maintain();
  std::string WantKeyOf(std::string_view owner) const;
  void NoteIdle();      // Disown's keys: their owner keys become idle
  // Others' wants: read on their own when due (PollWants), or in a
  // transaction the lane sends anyway (WantsRange's answer to TakeWants).
  bool WantsDue() const;
  nlohmann::json WantsRange() const;
  void TakeWants(const nlohmann::json& answer);
  void PollWants();
  void PublishWants();
  // Renews the lease, within cap and a background call's time.
  void KeepAlive(Deadline cap);
  // True when the last keep-alive failed, or the lease has no more than its
  // margin left by this replica's clock: renew before deciding under it.
  bool LeaseShort() const;
  // The lease is gone: every key owned under it is lost.
  void LeaseEnded();
  // Drops the lease and everything held under it (LeaseEnded, RevokeLease).
  void ForgetLease();
  // After a failed call that owned keys: a lease etcd no longer knows ends.
  void NoteFailure(const Status& status);
  void ReleaseIdle(Clock::time_point now);
  // A call that found its key another replica's: waits (parked_), or
  // answered Moving once its wait is over. `owner`: the other replica's
  // name, for the message.
  void Park(Call call, const std::string& owner);
  // Under mu_: whether a call from the queue must wait behind a parked one
  // of its keys (then it is parked).
  bool MustWait(const Call& call) const;
  // The owner keys a call needs (none for a record's or a node read).
  void OwnerNamesOf(const Call& call, std::vector<std::string>* owned,
                    std::vector<std::string>* checked) const;
  // Under mu_: parked calls go back to the front of the queue, in order.
  void RetryParked(Clock::time_point now);
  // Under mu_: when the lane must wake for its own work, at the latest.
  Clock::time_point NextWake(Clock::time_point now) const;
  // The lane decided a call that owns `name` (`taken`: it took it).
  void Owned(const std::string& name, bool taken);
  void RevokeLease();
  std::string KeyOf(std::string_view key) const;

  std::unique_ptr<EtcdTransport> transport_;
  const EtcdStoreOptions options_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Call> queue_;   // guarded by mu_
  bool stopping_ = false;    // guarded by mu_
  Status health_;            // guarded by mu_
  std::thread lane_;
  std::map<int64_t, int64_t> leases_;  // lane only: minute of expiry -> lease id
  // Ownership. The lane's lease and when it was last kept alive (sent).
  int64_t lease_ = 0;                     // lane only; 0 = none
  Clock::time_point lease_sent_{};        // lane only
  Clock::duration lease_ttl_{};           // lane only: as etcd granted it
  bool keepalive_ok_ = true;              // lane only: the last keep-alive succeeded
  Clock::time_point next_keepalive_{};    // lane only
  std::atomic<int64_t> live_lease_{0};    // any thread: the lease, while live
  std::atomic<int64_t> live_until_ns_{0}; // any thread: steady ns it lasts to, at least
  std::string owner_name64_;              // this replica's name, Base64
  struct OwnedKey {
    Clock::time_point last_use;    // the last call decided that owns it
    Clock::time_point idle_since;  // {}: a write of it may be in flight here
  };
  std::map<std::string, OwnedKey, std::less<>> owned_;  // lane only: by owner key
  // Owner keys that went idle, in time order, for release_after.
  std::deque<std::pair<Clock::time_point, std::string>> idle_names_;  // lane only
  // Owner keys another replica waits for (its want key, `<prefix>w/...`,
  // as last polled), and those this replica put wants for.
  std::set<std::string> wanted_;     // lane only
  std::set<std::string> my_wants_;   // lane only
  std::vector<std::string> new_wants_;  // lane only: to put
  Clock::time_point next_want_poll_{};  // lane only
  // Calls waiting for another replica's key, in call order, and the owner
  // keys they need (OwnerNamesOf's `owned`), each with its count.
  std::deque<Call> parked_;                        // guarded by mu_
  std::map<std::string, size_t, std::less<>> parked_keys_;  // guarded by mu_
  Clock::time_point next_retry_{};                 // guarded by mu_
  // Keys with no write left here (Disown), and when, in time order. A lock
  // of their own: Disown comes on every write's end, and must not wait for
  // the lane's batches.
  mutable std::mutex idle_mu_;
  std::deque<std::pair<Clock::time_point, std::string>> idle_;  // guarded by idle_mu_
  Deadline call_deadline_{};           // lane only: the running decision's deadline
  std::mutex close_mu_;
  bool closed_ = false;      // guarded by close_mu_
  // Counters() reads them from any thread; the lane alone writes them.
  struct Counts {
    std::atomic<uint64_t> requests{0};
    std::atomic<uint64_t> batches{0};
    std::atomic<uint64_t> writes{0};
    std::atomic<uint64_t> write_errors{0};
    std::atomic<uint64_t> keys_owned{0};
    std::atomic<uint64_t> takes{0};
    std::atomic<uint64_t> releases{0};
    std::atomic<uint64_t> lost{0};
    std::atomic<uint64_t> waits{0};
  } counts_;
  // A write transaction of `requests` calls: its outcome, and how many
  // keys it wrote.
  void CountWrite(size_t requests, const Status& status, size_t written);
};

}  // namespace fencegate::storage
