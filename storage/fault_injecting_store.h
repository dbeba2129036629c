#pragma once
// FaultInjectingStore wraps a real TokenStore and fails or delays operations
// on demand, as LevelDB's EnvWrapper does for files. Used by unit tests and,
// behind the hidden `--enable-test-faults` flag, by integration tests of the
// real binary. Thread-safe; faults can be changed while operations run.

#include <atomic>
#include <chrono>
#include <memory>

#include "storage/idempotency_store.h"
#include "storage/token_store.h"

namespace fencegate::storage {

struct FaultSpec {
  bool fail_writes = false;  // Advance/AdvanceAll/AdvanceTree/Raise report IoError, store nothing
  bool fail_reads = false;   // Get reports IoError
  std::chrono::milliseconds delay{0};  // delay every completion by this much
};

class FaultInjectingStore : public TokenStore, public IdempotencyStore {
 public:
  // Takes ownership of base and starts one timer thread (which runs
  // injected and delayed completions). No faults are active initially.
  explicit FaultInjectingStore(std::unique_ptr<TokenStore> base);
  // Calls Close().
  ~FaultInjectingStore() override;

  // Replaces the active faults; affects operations that start afterwards.
  // Thread-safe, may be called while operations run.
  void SetFaults(const FaultSpec& spec);
  // The active faults. Thread-safe.
  FaultSpec faults() const;

  // With fail_writes: answers IoError("injected write fault") on the timer
  // thread and never calls the base (nothing is stored). Otherwise forwards
  // to the base. With a delay, the handler runs `delay` after the answer is
  // known, on the timer thread; without one, on the base's thread.
  void Advance(std::string key, uint64_t token, FenceHandler handler) override;
  // As Advance: with fail_writes the whole batch answers IoError and
  // nothing of it is stored.
  void AdvanceAll(std::vector<KeyToken> items, BatchFenceHandler handler) override;
  void AdvanceTree(TreeWrite write, TreeHandler handler) override;
  void GetNode(std::string path, NodeHandler handler) override;
  // As Advance.
  void Raise(std::string key, uint64_t token, FenceHandler handler) override;
  // With fail_reads: answers IoError("injected read fault") without calling
  // the base. Delay as for Advance.
  void Get(std::string key, GetHandler handler) override;
  // This wrapper, over the base's idempotency records, when the base keeps
  // them (else nullptr). ReserveKey, FinishKey, ReleaseKey and RenewKey fail as
  // writes do (fail_writes: IoError, nothing stored), LookupKey as reads
  // (fail_reads); every completion is delayed by `delay`.
  IdempotencyStore* Idempotency() override;
  void ReserveKey(std::string key, IdempotencyRecord reservation,
                  ReserveHandler handler) override;
  void FinishKey(std::string key, IdempotencyRecord finished, int64_t now_ms,
                 ChangeHandler handler) override;
  void ReleaseKey(std::string key, uint64_t owner, ChangeHandler handler) override;
  void RenewKey(std::string key, uint64_t owner, int64_t expires_ms, int64_t now_ms,
                ChangeHandler handler) override;
  void LookupKey(std::string key, int64_t now_ms, LookupHandler handler) override;
  // IoError("injected fault") while fail_writes or fail_reads is set (a delay
  // alone is not a fault); otherwise the base's Health().
  Status Health() const override;
  // The base's.
  std::optional<StoreCounters> Counters() const override;
  bool Forwardable(int64_t owner) const override;
  void Disown(std::string_view key) override;
  bool OwnsKeys() const override;
  // Stops accepting operations (they answer Unavailable at once), closes the
  // base (which answers its queue), then runs every pending delayed
  // completion at once without waiting out its delay, and stops the timer
  // thread. Returns the base's Close() Status. Idempotent; must not be
  // called from a handler.
  Status Close() override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fencegate::storage
