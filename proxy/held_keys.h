#pragma once
// HeldKeys: the idempotency keys this process holds, whatever the store
// says about them (docs/contract.md, "Idempotency keys"). A key is held
// while a request that reserved it runs, while the response of one that ran
// waits for its record to be stored, and for in_flight_timeout after a
// request whose outcome is unknown ended. A repeat through this process is
// answered as for a running request while the key is held, even when the
// store's reservation ran out (its renewals failed while the store was
// down): a request this process runs or ran is never run again beside it.
//
// One per process (ProxyContext), shared by every I/O thread: a mutex
// around a map, held for a lookup or a change only.

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

namespace fencegate::proxy {

class HeldKeys {
 public:
  using Clock = std::chrono::steady_clock;
  struct Holder {
    uint64_t owner = 0;
    std::string head_digest;  // what a repeat must match (IdempotencyRecord's)
  };

  // owner holds key (until Drop, or `until` when given).
  void Hold(const std::string& key, uint64_t owner, const std::string& head_digest,
            std::optional<Clock::time_point> until = std::nullopt);
  // Ends owner's hold on key (not another owner's), now or at `until`.
  void Drop(const std::string& key, uint64_t owner);
  void DropAt(const std::string& key, uint64_t owner, Clock::time_point until);
  // Who holds key, if anybody.
  std::optional<Holder> Holding(const std::string& key) const;
  // Entries kept, expired ones not yet swept included.
  size_t size() const;

 private:
  struct Entry {
    Holder holder;
    std::optional<Clock::time_point> until;
  };
  // Drops every entry whose time is over: every kSweepEvery holds, so that
  // keys nobody looks up again do not pile up. Under mu_.
  void SweepLocked(Clock::time_point now) const;
  static constexpr uint64_t kSweepEvery = 256;

  mutable std::mutex mu_;
  mutable std::unordered_map<std::string, Entry> held_;  // guarded by mu_
  uint64_t holds_ = 0;                                    // guarded by mu_
};

}  // namespace fencegate::proxy
