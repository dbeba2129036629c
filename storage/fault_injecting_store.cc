#include "storage/fault_injecting_store.h"

#include <algorithm>
#include <condition_variable>
#include <functional>
#include <optional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace fencegate::storage {

// Completions that are injected (failures) or delayed go through one timer
// thread that runs them in (due time, arrival) order, so a delay keeps the
// order in which the base store completed. Completions that are neither
// injected nor delayed run on the base store's own thread, untouched.
struct FaultInjectingStore::Impl {
  using Clock = std::chrono::steady_clock;

  struct Timer {
    Clock::time_point due;
    uint64_t seq = 0;
    std::function<void()> fn;
  };
  // Heap order: the earliest due (then the earliest scheduled) on top.
  struct Later {
    bool operator()(const Timer& a, const Timer& b) const {
      return a.due != b.due ? a.due > b.due : a.seq > b.seq;
    }
  };

  explicit Impl(std::unique_ptr<TokenStore> b) : base(std::move(b)) {
    timer = std::thread([this] { TimerLoop(); });
    timer_id = timer.get_id();
  }

  FaultSpec Faults() const {
    std::lock_guard<std::mutex> lock(fault_mu);
    return spec;
  }

  // Runs fn on the timer thread once delay has passed; inline if the timer
  // thread has already stopped (only after Close()).
  void Schedule(std::chrono::milliseconds delay, std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> lock(timer_mu);
      if (!timer_done) {
        timers.push_back(Timer{Clock::now() + delay, next_seq++, std::move(fn)});
        std::push_heap(timers.begin(), timers.end(), Later{});
        timer_cv.notify_one();
        return;
      }
    }
    fn();
  }

  void TimerLoop() {
    std::unique_lock<std::mutex> lock(timer_mu);
    for (;;) {
      if (timers.empty()) {
        if (closing) break;
        timer_cv.wait(lock);
        continue;
      }
      Clock::time_point due = timers.front().due;
      if (!closing && Clock::now() < due) {
        timer_cv.wait_until(lock, due);
        continue;
      }
      std::pop_heap(timers.begin(), timers.end(), Later{});
      std::function<void()> fn = std::move(timers.back().fn);
      timers.pop_back();
      lock.unlock();
      fn();
      lock.lock();
    }
    timer_done = true;
  }

  // Wraps a (Status, value) handler so that it runs after `delay` on the
  // timer thread.
  template <class Handler>
  Handler Delayed(std::chrono::milliseconds delay, Handler handler) {
    if (delay.count() <= 0) return handler;
    return [this, delay, handler = std::move(handler)](const Status& s, auto value) {
      Schedule(delay, [handler, s, value = std::move(value)]() mutable {
        handler(s, std::move(value));
      });
    };
  }

  // One call of the base: refused once the store is closed; an injected
  // fault (a write's or a read's, as `write` says) answered with `empty` on
  // the timer thread; else `call` makes the base's call with the handler it
  // is given, which answers after the injected delay.
  template <class Handler, class Value, class Call>
  void Guarded(bool write, Handler handler, Value empty, Call call) {
    if (stopped.load()) return handler(Status::Unavailable("token store is closed"), empty);
    FaultSpec faults = Faults();
    if (write ? faults.fail_writes : faults.fail_reads) {
      Schedule(faults.delay, [handler = std::move(handler), write, empty] {
        handler(Status::IoError(write ? "injected write fault" : "injected read fault"), empty);
      });
      return;
    }
    call(Delayed(faults.delay, std::move(handler)));
  }

  // The same for a call of the base's idempotency records.
  template <class Handler, class Value, class Call>
  void Records(bool write, Handler handler, Value empty, Call call) {
    Guarded(write, std::move(handler), std::move(empty),
            [&](Handler delayed) { call(*base->Idempotency(), std::move(delayed)); });
  }

  const std::unique_ptr<TokenStore> base;

  mutable std::mutex fault_mu;
  FaultSpec spec;  // guarded by fault_mu

  std::atomic<bool> stopped{false};  // set by Close(); no new operations

  std::mutex timer_mu;
  std::condition_variable timer_cv;
  std::vector<Timer> timers;  // guarded by timer_mu; a heap ordered by Later
  uint64_t next_seq = 0;      // guarded by timer_mu
  bool closing = false;       // guarded by timer_mu; run all timers now
  bool timer_done = false;    // guarded by timer_mu; the thread has exited
  std::thread timer;
  std::thread::id timer_id;  // set once in the constructor

  std::mutex close_mu;   // serialises Close()
  bool closed = false;   // guarded by close_mu
  Status close_status;   // guarded by close_mu
};

FaultInjectingStore::FaultInjectingStore(std::unique_ptr<TokenStore> base)
    : impl_(std::make_unique<Impl>(std::move(base))) {}

FaultInjectingStore::~FaultInjectingStore() {
  Status s = FaultInjectingStore::Close();  // qualified: no virtual dispatch in a destructor
  (void)s;  // nobody to report to; every handler has been answered
}

void FaultInjectingStore::SetFaults(const FaultSpec& spec) {
  std::lock_guard<std::mutex> lock(impl_->fault_mu);
  impl_->spec = spec;
}

FaultSpec FaultInjectingStore::faults() const { return impl_->Faults(); }

void FaultInjectingStore::Advance(std::string key, uint64_t token,
                                  FenceHandler handler) {
  impl_->Guarded(true, std::move(handler), Fence{}, [&](FenceHandler h) {
    impl_->base->Advance(std::move(key), token, std::move(h));
  });
}

void FaultInjectingStore::AdvanceAll(std::vector<KeyToken> items, BatchFenceHandler handler) {
  impl_->Guarded(true, std::move(handler), BatchFence{}, [&](BatchFenceHandler h) {
    impl_->base->AdvanceAll(std::move(items), std::move(h));
  });
}

void FaultInjectingStore::AdvanceTree(TreeWrite write, TreeHandler handler) {
  impl_->Guarded(true, std::move(handler), TreeVerdict{}, [&](TreeHandler h) {
    impl_->base->AdvanceTree(std::move(write), std::move(h));
  });
}

void FaultInjectingStore::GetNode(std::string path, NodeHandler handler) {
  impl_->Guarded(false, std::move(handler), std::nullopt, [&](NodeHandler h) {
    impl_->base->GetNode(std::move(path), std::move(h));
  });
}

void FaultInjectingStore::Raise(std::string key, uint64_t token,
                                FenceHandler handler) {
  impl_->Guarded(true, std::move(handler), Fence{}, [&](FenceHandler h) {
    impl_->base->Raise(std::move(key), token, std::move(h));
  });
}

void FaultInjectingStore::Get(std::string key, GetHandler handler) {
  impl_->Guarded(false, std::move(handler), std::optional<uint64_t>{}, [&](GetHandler h) {
    impl_->base->Get(std::move(key), std::move(h));
  });
}

IdempotencyStore* FaultInjectingStore::Idempotency() {
  return impl_->base->Idempotency() != nullptr ? this : nullptr;
}

void FaultInjectingStore::ReserveKey(std::string key, IdempotencyRecord reservation,
                                     ReserveHandler handler) {
  impl_->Records(true, std::move(handler), Reservation{},
                 [&](IdempotencyStore& base, ReserveHandler h) {
                   base.ReserveKey(std::move(key), std::move(reservation), std::move(h));
                 });
}

void FaultInjectingStore::FinishKey(std::string key, IdempotencyRecord finished, int64_t now_ms,
                                    ChangeHandler handler) {
  impl_->Records(true, std::move(handler), false, [&](IdempotencyStore& base, ChangeHandler h) {
    base.FinishKey(std::move(key), std::move(finished), now_ms, std::move(h));
  });
}

void FaultInjectingStore::ReleaseKey(std::string key, uint64_t owner, ChangeHandler handler) {
  impl_->Records(true, std::move(handler), false, [&](IdempotencyStore& base, ChangeHandler h) {
    base.ReleaseKey(std::move(key), owner, std::move(h));
  });
}

void FaultInjectingStore::RenewKey(std::string key, uint64_t owner, int64_t expires_ms,
                                   int64_t now_ms, ChangeHandler handler) {
  impl_->Records(true, std::move(handler), false, [&](IdempotencyStore& base, ChangeHandler h) {
    base.RenewKey(std::move(key), owner, expires_ms, now_ms, std::move(h));
  });
}

void FaultInjectingStore::LookupKey(std::string key, int64_t now_ms, LookupHandler handler) {
  impl_->Records(false, std::move(handler), std::optional<IdempotencyRecord>{},
                 [&](IdempotencyStore& base, LookupHandler h) {
                   base.LookupKey(std::move(key), now_ms, std::move(h));
                 });
}

Status FaultInjectingStore::Health() const {
  if (!impl_->stopped.load()) {
    FaultSpec spec = impl_->Faults();
    if (spec.fail_writes || spec.fail_reads) {
      return Status::IoError("injected fault");
    }
  }
  return impl_->base->Health();
}

std::optional<StoreCounters> FaultInjectingStore::Counters() const {
  return impl_->base->Counters();
}

bool FaultInjectingStore::Forwardable(int64_t owner) const {
  return impl_->base->Forwardable(owner);
}

void FaultInjectingStore::Disown(std::string_view key) { impl_->base->Disown(key); }

bool FaultInjectingStore::OwnsKeys() const { return impl_->base->OwnsKeys(); }

Status FaultInjectingStore::Close() {
  if (std::this_thread::get_id() == impl_->timer_id) {
    return Status::InvalidArgument(
        "Close() called from a token store handler; call it from another "
        "thread");
  }
  std::lock_guard<std::mutex> close_lock(impl_->close_mu);
  if (impl_->closed) return impl_->close_status;
  impl_->stopped.store(true);
  // The base answers what it has queued; delayed answers land in the timer
  // heap, which then runs everything at once instead of waiting out delays.
  Status status = impl_->base->Close();
  {
    std::lock_guard<std::mutex> lock(impl_->timer_mu);
    impl_->closing = true;
  }
  impl_->timer_cv.notify_all();
  impl_->timer.join();
  impl_->closed = true;
  impl_->close_status = status;
  return status;
}

}  // namespace fencegate::storage
