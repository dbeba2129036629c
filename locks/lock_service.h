#pragma once
// LockService: named locks with leases and fencing tokens (docs/contract.md,
// "Lock service").
//
// A lock is free or held by one lease. Acquire grants a lease with a TTL and a
// token strictly greater than every token granted before for that lock name,
// in this process or any earlier one on the same data directory: the token is
// written through the TokenStore (sync durability: fsynced) before the grant
// is reported, and the next grant starts above the stored value. A lease that
// is not renewed expires on the injected monotonic clock; an expired lease
// can neither renew nor release.
//
// Threading: not thread-safe. Every method, and every handler it invokes,
// runs on `executor` (store answers are posted back to it). Answers that
// need no store access (held, unknown lease, renew, release) are given
// inline, before the call returns; grants come later, from the executor.
//
// Time: the service reads time only from its Clock. It arms one timer for
// the next deadline (lease expiry or wait timeout) and also expires lazily at
// the start of every call, so a late timer never extends a lease. Tests drive
// a fake clock and call ExpireDue() instead of waiting.

#include <boost/asio/any_io_executor.hpp>
#include <atomic>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>

#include "storage/token_store.h"

namespace fencegate::locks {

using Duration = std::chrono::milliseconds;
using TimePoint = std::chrono::steady_clock::time_point;

// The monotonic clock the service reads (steady_clock in the binary).
class Clock {
 public:
  virtual ~Clock() = default;
  virtual TimePoint Now() const = 0;
};

class SteadyClock : public Clock {
 public:
  TimePoint Now() const override { return std::chrono::steady_clock::now(); }
};

// The store key under which a lock name's last granted token is kept.
// Proxy keys never start with a NUL byte (canonical paths and header values
// cannot carry one), so lock counters and fenced keys cannot collide.
std::string LockStoreKey(std::string_view name);
inline constexpr std::string_view kLockKeyPrefix{"\0locks/", 7};

enum class LockError {
  kNone,
  kHeld,           // 409: another lease holds it (after any wait)
  kUnknownLease,   // 404: no such lease on this lock (never granted, released, or restarted)
  kLeaseExpired,   // 410: the lease was valid but its TTL ran out
  kStore,          // 503: the token could not be made durable
  kShuttingDown,   // 503
};

struct LockResult {
  LockError error = LockError::kNone;
  uint64_t token = 0;         // granted / current token of the lease
  uint64_t lease = 0;         // lease id (random, < 2^53 so JSON numbers keep it exact)
  Duration expires_in{0};     // kNone: time left on the lease; kHeld: on the holder's lease
  storage::Status status;     // kStore: the store's error

  static LockResult Fail(LockError e) {
    LockResult r;
    r.error = e;
    return r;
  }
  static LockResult Ok(uint64_t token, uint64_t lease, Duration expires_in) {
    LockResult r;
    r.token = token;
    r.lease = lease;
    r.expires_in = expires_in;
    return r;
  }
};

// What the service did, for GET /metrics: written on the service's thread,
// read at scrape time from another (relaxed atomics).
struct LockCounters {
  std::atomic<uint64_t> grants{0};        // leases granted (a token made durable)
  std::atomic<uint64_t> renewals{0};      // leases renewed
  std::atomic<uint64_t> releases{0};      // leases released by their holder
  std::atomic<uint64_t> expirations{0};   // leases whose TTL ran out
  std::atomic<uint64_t> refused_held{0};  // acquires answered 409: held, after any wait
  std::atomic<uint64_t> store_errors{0};  // grants whose token could not be made durable

  static void Bump(std::atomic<uint64_t>& a) { a.fetch_add(1, std::memory_order_relaxed); }
};

class LockService {
 public:
  using Handler = std::function<void(const LockResult&)>;

  LockService(boost::asio::any_io_executor executor, storage::TokenStore& store, const Clock& clock);
  ~LockService();

  // Grants the lock to a new lease of `ttl` (> 0; the caller checks the
  // configured maximum). If it is held, waits up to `wait` for it to be
  // released or to expire, then answers kHeld. Waiters are served in order.
  void Acquire(const std::string& name, Duration ttl, Duration wait, Handler handler);

  // Restarts the lease's TTL from now (the TTL it was granted with).
  void Renew(const std::string& name, uint64_t lease, const Handler& handler);

  // Frees the lock; the next waiter, if any, is granted.
  void Release(const std::string& name, uint64_t lease, const Handler& handler);

  // Expires every lease and wait whose deadline is <= Now(). Called by the
  // service's timer; tests call it after moving a fake clock.
  void ExpireDue();

  // Answers every waiter kShuttingDown, cancels the timer, refuses new
  // calls. Grants whose store write is in flight still complete.
  void Shutdown();

  size_t held_count() const;  // locks currently held or being granted
  const LockCounters& counters() const { return counters_; }

 private:
  struct Lease {
    uint64_t id = 0;
    uint64_t token = 0;
    Duration ttl{0};
    TimePoint expires;
  };
  struct Waiter {
    Duration ttl{0};
    TimePoint deadline;
    Handler handler;
  };
  struct Lock {
    std::optional<uint64_t> last_token;  // highest token known durable; nullopt until read
    bool granting = false;               // a grant's store write is in flight
    std::optional<Lease> holder;
    uint64_t last_expired_lease = 0;     // to tell "expired" from "unknown"
    std::deque<Waiter> waiters;
  };

  void Grant(const std::string& name, Duration ttl, Handler handler);
  void WriteToken(const std::string& name, uint64_t candidate, Duration ttl, Handler handler);
  void FinishGrant(const std::string& name, uint64_t token, Duration ttl,
                   const Handler& handler);
  void FailGrant(const std::string& name, const storage::Status& status,
                 const Handler& handler);
  void ServeWaiters(const std::string& name);
  void MaybeForget(const std::string& name);
  void ArmTimer();
  uint64_t NewLeaseId();
  LockResult Held(const Lock& lock);  // counts the refusal

  boost::asio::any_io_executor executor_;
  storage::TokenStore& store_;
  const Clock& clock_;
  boost::asio::steady_timer timer_;
  std::optional<TimePoint> timer_deadline_;
  std::mt19937_64 rng_;
  std::map<std::string, Lock> locks_;  // only names that are held, granting or awaited
  std::shared_ptr<bool> alive_;        // store callbacks check it before touching `this`
  bool shut_down_ = false;
  LockCounters counters_;
};

}  // namespace fencegate::locks
