#include "locks/lock_service.h"

#include <spdlog/spdlog.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>

namespace fencegate::locks {

namespace asio = boost::asio;

namespace {
// Free, idle locks are remembered (to tell an expired lease from an unknown
// one and to skip a store read) until there are this many names.
constexpr size_t kMaxRememberedLocks = 10000;
constexpr uint64_t kMaxJsonSafeInteger = (uint64_t{1} << 53) - 1;

Duration Left(TimePoint deadline, TimePoint now) {
  return deadline > now ? std::chrono::duration_cast<Duration>(deadline - now) : Duration{0};
}
}  // namespace

std::string LockStoreKey(std::string_view name) {
  std::string key(kLockKeyPrefix);
  key.append(name);
  return key;
}

LockService::LockService(asio::any_io_executor executor, storage::TokenStore& store,
                         const Clock& clock)
    : executor_(std::move(executor)), store_(store), clock_(clock), timer_(executor_),
      rng_(std::random_device{}()), alive_(std::make_shared<bool>(true)) {}

LockService::~LockService() { *alive_ = false; }

size_t LockService::held_count() const {
  size_t n = 0;
  for (const auto& [name, lock] : locks_) n += (lock.holder || lock.granting) ? 1 : 0;
  return n;
}

uint64_t LockService::NewLeaseId() {
  // Random, so a lease id from before a restart never names a new lease.
  for (;;) {
    uint64_t id = rng_() & kMaxJsonSafeInteger;
    if (id != 0) return id;
  }
}

LockResult LockService::Held(const Lock& lock) {
  LockCounters::Bump(counters_.refused_held);
  LockResult r;
  r.error = LockError::kHeld;
  if (lock.holder) r.expires_in = Left(lock.holder->expires, clock_.Now());
  return r;
}

void LockService::Acquire(const std::string& name, Duration ttl, Duration wait, Handler handler) {
  if (shut_down_) return handler(LockResult::Fail(LockError::kShuttingDown));
  ExpireDue();
  Lock& lock = locks_[name];
  if (!lock.holder && !lock.granting && lock.waiters.empty()) {
    return Grant(name, ttl, std::move(handler));
  }
  if (wait <= Duration{0}) return handler(Held(lock));
  lock.waiters.push_back(Waiter{ttl, clock_.Now() + wait, std::move(handler)});
  ArmTimer();
}

void LockService::Renew(const std::string& name, uint64_t lease, const Handler& handler) {
  if (shut_down_) return handler(LockResult::Fail(LockError::kShuttingDown));
  ExpireDue();
  auto it = locks_.find(name);
  if (it == locks_.end() || !it->second.holder || it->second.holder->id != lease) {
    bool expired = it != locks_.end() && lease != 0 && it->second.last_expired_lease == lease;
    return handler(LockResult::Fail(expired ? LockError::kLeaseExpired : LockError::kUnknownLease));
  }
  Lease& l = *it->second.holder;
  l.expires = clock_.Now() + l.ttl;
  ArmTimer();
  LockCounters::Bump(counters_.renewals);
  handler(LockResult::Ok(l.token, l.id, l.ttl));
}

void LockService::Release(const std::string& name, uint64_t lease, const Handler& handler) {
  if (shut_down_) return handler(LockResult::Fail(LockError::kShuttingDown));
  ExpireDue();
  auto it = locks_.find(name);
  if (it == locks_.end() || !it->second.holder || it->second.holder->id != lease) {
    bool expired = it != locks_.end() && lease != 0 && it->second.last_expired_lease == lease;
    return handler(LockResult::Fail(expired ? LockError::kLeaseExpired : LockError::kUnknownLease));
  }
  LockResult r = LockResult::Ok(it->second.holder->token, lease, Duration{0});
  it->second.holder.reset();
  LockCounters::Bump(counters_.releases);
  ServeWaiters(name);
  handler(r);
  MaybeForget(name);
}

void LockService::ExpireDue() {
  TimePoint now = clock_.Now();
  std::vector<std::string> freed;
  std::vector<std::pair<std::string, Handler>> timed_out;
  for (auto& [name, lock] : locks_) {
    if (lock.holder && lock.holder->expires <= now) {
      spdlog::info("locks: lease {} on '{}' (token {}) expired", lock.holder->id, name,
                   lock.holder->token);
      lock.last_expired_lease = lock.holder->id;
      lock.holder.reset();
      LockCounters::Bump(counters_.expirations);
    }
    for (auto w = lock.waiters.begin(); w != lock.waiters.end();) {
      if (w->deadline <= now) {
        timed_out.emplace_back(name, std::move(w->handler));
        w = lock.waiters.erase(w);
      } else {
        ++w;
      }
    }
    if (!lock.holder && !lock.granting) freed.push_back(name);
  }
  // A waiter whose wait ran out at the same instant as the lease is
  // served first if still queued: its deadline is checked above, so it is not.
  for (const std::string& name : freed) ServeWaiters(name);
  // A waiter that gave up learns how long the lock's holder (if any, after
  // the waiters served above) still has, as an acquire without a wait does.
  for (auto& [name, h] : timed_out) {
    auto it = locks_.find(name);
    if (it != locks_.end()) {
      h(Held(it->second));
    } else {
      LockCounters::Bump(counters_.refused_held);
      h(LockResult::Fail(LockError::kHeld));
    }
  }
  ArmTimer();
}

void LockService::ServeWaiters(const std::string& name) {
  auto it = locks_.find(name);
  if (it == locks_.end()) return;
  Lock& lock = it->second;
  if (lock.holder || lock.granting || lock.waiters.empty()) return;
  Waiter w = std::move(lock.waiters.front());
  lock.waiters.pop_front();
  Grant(name, w.ttl, std::move(w.handler));
}

void LockService::Grant(const std::string& name, Duration ttl, Handler handler) {
  Lock& lock = locks_[name];
  lock.granting = true;
  if (lock.last_token) return WriteToken(name, *lock.last_token + 1, ttl, std::move(handler));
  // First grant of this name in this process: start above what is stored.
  store_.Get(LockStoreKey(name),
             [this, alive = alive_, guard = asio::make_work_guard(executor_), name, ttl,
              handler = std::move(handler)](const storage::Status& st,
                                            std::optional<uint64_t> stored) mutable {
               asio::post(guard.get_executor(), [this, alive, name, ttl, st, stored,
                                                 handler = std::move(handler)]() mutable {
                 if (!*alive) return;
                 if (!st.ok()) return FailGrant(name, st, handler);
                 locks_[name].last_token = stored.value_or(0);
                 WriteToken(name, stored.value_or(0) + 1, ttl, std::move(handler));
               });
             });
}

void LockService::WriteToken(const std::string& name, uint64_t candidate, Duration ttl,
                             Handler handler) {
  if (candidate == 0) {  // the counter is at 2^64-1: no greater token exists
    return FailGrant(name, storage::Status::InvalidArgument("token space exhausted"), handler);
  }
  // Advance refuses when the stored value is higher (an admin fence raised
  // it): then retry above it. Accepted means durable before we answer.
  store_.Advance(
      LockStoreKey(name), candidate,
      [this, alive = alive_, guard = asio::make_work_guard(executor_), name, candidate, ttl,
       handler = std::move(handler)](const storage::Status& st, storage::Fence f) mutable {
        asio::post(guard.get_executor(), [this, alive, name, candidate, ttl, st, f,
                                          handler = std::move(handler)]() mutable {
          if (!*alive) return;
          if (!st.ok()) return FailGrant(name, st, handler);
          if (!f.accepted) {
            locks_[name].last_token = f.current;
            return WriteToken(name, f.current + 1, ttl, std::move(handler));
          }
          FinishGrant(name, candidate, ttl, handler);
        });
      });
}

void LockService::FinishGrant(const std::string& name, uint64_t token, Duration ttl,
                              const Handler& handler) {
  Lock& lock = locks_[name];
  lock.granting = false;
  lock.last_token = token;
  lock.holder = Lease{NewLeaseId(), token, ttl, clock_.Now() + ttl};
  ArmTimer();
  spdlog::info("locks: '{}' granted to lease {} with token {} (ttl {}ms)", name, lock.holder->id,
               token, ttl.count());
  LockCounters::Bump(counters_.grants);
  handler(LockResult::Ok(token, lock.holder->id, ttl));
}

void LockService::FailGrant(const std::string& name, const storage::Status& status,
                            const Handler& handler) {
  spdlog::error("locks: cannot persist a token for '{}': {}", name, status.ToString());
  Lock& lock = locks_[name];
  lock.granting = false;
  lock.last_token.reset();  // unknown again: re-read before the next grant
  LockCounters::Bump(counters_.store_errors);
  LockResult r;
  r.error = LockError::kStore;
  r.status = status;
  handler(r);
  ServeWaiters(name);
}

void LockService::MaybeForget(const std::string& name) {
  if (locks_.size() <= kMaxRememberedLocks) return;
  auto it = locks_.find(name);
  if (it != locks_.end() && !it->second.holder && !it->second.granting &&
      it->second.waiters.empty()) {
    locks_.erase(it);
  }
}

void LockService::ArmTimer() {
  if (shut_down_) return;
  std::optional<TimePoint> next;
  for (const auto& [name, lock] : locks_) {
    if (lock.holder && (!next || lock.holder->expires < *next)) next = lock.holder->expires;
    for (const Waiter& w : lock.waiters) {
      if (!next || w.deadline < *next) next = w.deadline;
    }
  }
  if (next == timer_deadline_) return;
  timer_deadline_ = next;
  if (!next) {
    timer_.cancel();
    return;
  }
  // The timer runs on steady_clock; the service's clock decides what is due.
  timer_.expires_after(Left(*next, clock_.Now()) + Duration{1});
  timer_.async_wait([this, alive = alive_](boost::system::error_code ec) {
    if (ec || !*alive) return;
    timer_deadline_.reset();
    ExpireDue();
  });
}

void LockService::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  timer_.cancel();
  timer_deadline_.reset();
  std::vector<Handler> waiting;
  for (auto& [name, lock] : locks_) {
    for (Waiter& w : lock.waiters) waiting.push_back(std::move(w.handler));
    lock.waiters.clear();
  }
  for (Handler& h : waiting) h(LockResult::Fail(LockError::kShuttingDown));
}

}  // namespace fencegate::locks
