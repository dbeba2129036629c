#pragma once
// FaultInjectingStore wraps a real TokenStore and fails or delays operations
// on demand, as LevelDB's EnvWrapper does for files. Used by unit tests and,
// behind the hidden `--enable-test-faults` flag, by integration tests of the
// real binary. Thread-safe; faults can be changed while operations run.

#include <atomic>
#include <chrono>
#include <memory>

#include "storage/token_store.h"

namespace fencegate::storage {

struct FaultSpec {
  bool fail_writes = false;  // Advance/Raise report IoError, store nothing
  bool fail_reads = false;   // Get reports IoError
  std::chrono::milliseconds delay{0};  // delay every completion by this much
};

class FaultInjectingStore : public TokenStore {
 public:
  explicit FaultInjectingStore(std::unique_ptr<TokenStore> base);
  ~FaultInjectingStore() override;

  void SetFaults(const FaultSpec& spec);
  FaultSpec faults() const;

  void Advance(std::string key, uint64_t token, FenceHandler handler) override;
  void Raise(std::string key, uint64_t token, FenceHandler handler) override;
  void Get(std::string key, GetHandler handler) override;
  Status Health() const override;
  Status Close() override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fencegate::storage
