// Fuzz target: sequences of fenced writes through the real FenceFilter and
// KeyQueue (the key's turn and the check-and-advance of docs/contract.md,
// "The write path"), against a store whose answers the fuzzer delivers in any
// order that keeps the store's call order wherever two calls share a key
// (token_store.h), failing some, and an upstream exchange whose end (the
// lease's release) the fuzzer also chooses.
//
// The input is a list of operations, two bytes each:
//   write   key 0..3, token 0..7, enforce or shadow mode, and maybe a
//           second key (a COPY or MOVE: both fenced all or nothing)
//   answer  deliver one pending store answer (any that the call order
//           allows), ok or failed
//   raise   the admin fence on a key: straight to the store, or as the
//           admin listener does it, through the key's queue (a barrier)
//   release end one forwarded write's upstream exchange
//   poll    run the handlers that are ready
// and at the end every exchange ends and every answer is delivered.
//
// Invariants checked (a violation traps):
//  - per key, at most one write holds the key at a time (mutual exclusion);
//  - per key, Advances reach the store in arrival order, and forwarded
//    writes get their verdicts in arrival order (FIFO), after every earlier
//    write of the key had its verdict; each write gets exactly one verdict,
//    and nothing waits once all is delivered (no deadlock, whatever order
//    the keys of two-key writes come in);
//  - enforce mode forwards only if the store accepted (every key's token
//    >= the highest accepted or raised before it, in the store's order) and
//    answers 409 with that highest value, naming the first stale key,
//    otherwise; 503 when the store failed, and 503 too_many_waiting only
//    with max_waiting_per_key writes already waiting;
//  - an accepted write refused at its turn is below an admin fence on one
//    of its keys made after it arrived (409, current = that fence), and
//    after an admin fence on a key no write with a lower token is forwarded
//    but the one that held the key's turn when the fence was made;
//  - shadow mode always forwards; a refused verdict holds no lease.

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fence/fence_filter.h"
#include "fence/key_queue.h"
#include "storage/memory_store.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/support/gated_store.h"

namespace fencegate::fuzz {
namespace {

constexpr size_t kMaxWaiting = 2;
constexpr int kKeys = 4;

std::string KeyName(int k) { return "/objects/k" + std::to_string(k); }
int KeyIndex(const std::string& name) { return name.back() - '0'; }

// The store: the in-memory engine, deciding on the caller's thread, behind
// a gate that holds every write call until the fuzzer lets it through (or
// fails it). The direct admin raise goes to the engine at once; the raise
// through the key's queue waits at the gate like the rest.
using Gate = testing::GatedStore;

bool SharesKey(const Gate::Held& a, const Gate::Held& b) {
  for (const auto& x : a.items) {
    for (const auto& y : b.items) {
      if (x.key == y.key) return true;
    }
  }
  return false;
}

// The held call a store that decides in call order may answer in place of
// held[i]: the oldest before it that shares a key with it, followed back
// until none does.
size_t Decidable(const std::vector<Gate::Held>& held, size_t i) {
  for (size_t j = 0; j < i; ++j) {
    if (SharesKey(held[j], held[i])) return Decidable(held, j);
  }
  return i;
}

// The engine's stored value of key, 0 when absent (it answers on this thread).
uint64_t Current(storage::TokenStore& engine, const std::string& key) {
  std::optional<uint64_t> value;
  bool answered = false;
  engine.Get(key, [&](const storage::Status& s, std::optional<uint64_t> v) {
    FUZZ_CHECK(s.ok());
    value = v;
    answered = true;
  });
  FUZZ_CHECK(answered);
  return value.value_or(0);
}

struct Write {
  std::vector<int> keys;  // the first is WriteIntent::key
  uint64_t token;
  bool shadow;
  bool verdict = false;
  bool placed = false;  // has its place in its keys' queues (was not refused as overloaded)
};

// An admin fence through the key queue.
struct AdminFence {
  int key;
  uint64_t token;
  size_t writes_before;            // writes that arrived before it
  std::optional<size_t> holder;    // the write that may hold the key's turn
};

struct Expected {
  bool accepted = false;
  uint64_t current = 0;  // refused: the stale key's stored value
  int stale_key = -1;
};

struct Model {
  std::vector<Write> writes;
  std::deque<size_t> order[kKeys];     // writes of each key without a verdict, in arrival order
  std::deque<size_t> in_store[kKeys];  // writes of each key whose Advance awaits its answer
  // Forwarded writes whose upstream exchange has not ended: keys, lease.
  std::vector<std::pair<std::vector<int>, proxy::KeyLease>> held;
  std::map<size_t, bool> failed;       // write -> its store answer failed (once answered)
  std::map<size_t, Expected> expect;   // write -> what the store decided
  std::vector<AdminFence> fences;
  storage::TokenStore* engine = nullptr;
  Gate* store = nullptr;

  // The store answers what the call order lets it answer in place of
  // held[idx]: note what the model expects for the write it belongs to.
  void Answer(size_t idx, bool fail) {
    const std::vector<Gate::Held> held = store->held();
    idx = Decidable(held, idx);
    const Gate::Held& p = held[idx];
    if (p.kind == Gate::Kind::kRaise) return Deliver(idx, fail);
    const int first = KeyIndex(p.items[0].key);
    FUZZ_CHECK(!in_store[first].empty());
    const size_t id = in_store[first].front();
    FUZZ_CHECK(p.items.size() == writes[id].keys.size());
    Expected e;
    e.accepted = true;
    for (size_t j = 0; j < p.items.size(); ++j) {
      const int key = KeyIndex(p.items[j].key);
      FUZZ_CHECK(key == writes[id].keys[j]);
      FUZZ_CHECK(!in_store[key].empty() && in_store[key].front() == id);  // arrival order
      in_store[key].pop_front();
      FUZZ_CHECK(writes[id].token == p.items[j].token);
      const uint64_t cur = Current(*engine, p.items[j].key);
      if (e.accepted && writes[id].token < cur) {
        e = Expected{false, cur, key};
      }
    }
    failed[id] = fail;
    expect[id] = e;
    Deliver(idx, fail);
  }

  void Deliver(size_t idx, bool fail) {
    if (fail) {
      store->Fail(idx);
    } else {
      store->Let(idx);
    }
  }

  // The write that holds, or will be next to hold, the key's turn: the
  // first placed one without a verdict, when no forwarded write holds it.
  std::optional<size_t> TurnOf(int key) const {
    if (HeldByAForwardedWrite(key)) return std::nullopt;
    for (size_t id : order[key]) {
      if (writes[id].placed) return id;
    }
    return std::nullopt;
  }

  bool HeldByAForwardedWrite(int key) const {
    for (const auto& h : held) {
      if (std::find(h.first.begin(), h.first.end(), key) != h.first.end()) return true;
    }
    return false;
  }
};

void OnVerdict(Model& m, size_t id, size_t waiting_before, proxy::FenceVerdict v) {
  Write& w = m.writes[id];
  FUZZ_CHECK(!w.verdict);
  w.verdict = true;
  if (v.outcome == "overloaded") {
    FUZZ_CHECK(!w.shadow && !v.forward && !v.lease.held());
    FUZZ_CHECK(waiting_before >= kMaxWaiting);
    FUZZ_CHECK(v.reply && v.reply->result_int() == 503);
    FUZZ_CHECK(!m.failed.count(id));  // never reached the store
    for (int k : w.keys) m.order[k].erase(std::find(m.order[k].begin(), m.order[k].end(), id));
    return;
  }
  FUZZ_CHECK(m.failed.count(id) == 1);  // the store answered this write
  for (int k : w.keys) {
    auto& q = m.order[k];
    if (v.forward) {
      FUZZ_CHECK(!q.empty() && q.front() == id);  // FIFO per key
      q.pop_front();
    } else {
      q.erase(std::find(q.begin(), q.end(), id));  // a refusal needs no turn
    }
  }
  const Expected& e = m.expect[id];
  if (w.shadow) {
    FUZZ_CHECK(v.forward && !v.reply);
  } else if (m.failed[id]) {
    FUZZ_CHECK(!v.forward && v.outcome == "store_unavailable" && v.reply->result_int() == 503);
  } else if (!e.accepted) {
    FUZZ_CHECK(!v.forward && v.outcome == "stale" && v.reply->result_int() == 409);
    FUZZ_CHECK(v.current == e.current);
    FUZZ_CHECK(v.reply->body().find("\"key\":\"" + KeyName(e.stale_key) + "\"") !=
               std::string::npos);
  } else if (!v.forward) {
    // Accepted, then refused at its turn: an admin fence on one of its keys
    // is above its token (made after it arrived, or before with a Raise
    // that failed: the floor stays).
    FUZZ_CHECK(v.outcome == "stale" && v.reply->result_int() == 409 && v.current > w.token);
    bool fenced = false;
    for (const AdminFence& f : m.fences) {
      fenced = fenced || (f.token == v.current &&
                          std::find(w.keys.begin(), w.keys.end(), f.key) != w.keys.end());
    }
    FUZZ_CHECK(fenced);
  } else {
    // The barrier: past an admin fence made after it arrived, only the
    // write that held the key's turn then goes with a lower token.
    for (const AdminFence& f : m.fences) {
      if (f.writes_before > id && f.token > w.token &&
          std::find(w.keys.begin(), w.keys.end(), f.key) != w.keys.end()) {
        FUZZ_CHECK(f.holder == id);
      }
    }
  }
  if (!v.forward) {
    FUZZ_CHECK(!v.lease.held());
    return;
  }
  FUZZ_CHECK(v.lease.held());
  FUZZ_CHECK(v.lease.more().size() + 1 == w.keys.size());
  for (int k : w.keys) FUZZ_CHECK(!m.HeldByAForwardedWrite(k));  // one holder per key
  m.held.emplace_back(w.keys, std::move(v.lease));
}

}  // namespace
}  // namespace fencegate::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fencegate::fuzz;
  namespace proxy = fencegate::proxy;
  namespace storage = fencegate::storage;
  boost::asio::io_context ioc;
  storage::MemoryStore engine(storage::MemoryStoreOptions{.answer_on_caller = true});
  Gate store(engine);
  store.Hold();
  proxy::KeyQueue queue(kMaxWaiting);
  proxy::FenceFilter filter(store, queue);
  Model m;
  m.engine = &engine;
  m.store = &store;

  auto poll = [&] {
    ioc.restart();
    ioc.poll();
  };
  auto release = [&](size_t i) {
    m.held[i].second.Release();
    m.held.erase(m.held.begin() + static_cast<ptrdiff_t>(i));
  };

  for (size_t i = 0; i + 1 < size && m.writes.size() < 64; i += 2) {
    const uint8_t op = data[i] % 5, arg = data[i + 1];
    switch (op) {
      case 0: {  // write
        Write w{{arg % kKeys}, static_cast<uint64_t>((arg >> 2) % 8), (arg & 0x80) != 0};
        if ((arg & 0x40) != 0) w.keys.push_back((w.keys[0] + 1 + ((arg >> 5) & 1)) % kKeys);
        size_t id = m.writes.size();
        m.writes.push_back(w);
        for (int k : w.keys) m.order[k].push_back(id);
        proxy::WriteIntent intent;
        intent.kind = proxy::WriteIntent::Kind::kFence;
        intent.key = KeyName(w.keys[0]);
        for (size_t k = 1; k < w.keys.size(); ++k) intent.extra_keys.push_back(KeyName(w.keys[k]));
        intent.token = w.token;
        intent.shadow = w.shadow;
        size_t waiting_before = queue.waiting();
        size_t pending_before = store.held_count();
        filter.Check(intent, ioc.get_executor(), [&m, id, waiting_before](proxy::FenceVerdict v) {
          OnVerdict(m, id, waiting_before, std::move(v));
        });
        // The Advance is made inside Check, unless a key's queue was full.
        if (store.held_count() == pending_before + 1) {
          const Gate::Held p = store.held().back();
          FUZZ_CHECK(p.items.size() == w.keys.size());
          FUZZ_CHECK(p.kind == (w.keys.size() == 1 ? Gate::Kind::kAdvance
                                                   : Gate::Kind::kAdvanceAll));
          FUZZ_CHECK(storage::CheckBatchItems(p.items, storage::MemoryStore::kMaxKeyBytes).ok());
          for (int k : w.keys) m.in_store[k].push_back(id);
          m.writes[id].placed = true;
        } else {
          FUZZ_CHECK(store.held_count() == pending_before);
        }
        break;
      }
      case 1:  // a store answer, any pending one, ok or failed
        if (store.held_count() > 0) m.Answer(arg % store.held_count(), (arg & 0x80) != 0);
        break;
      case 2: {  // the admin fence
        const int key = arg % kKeys;
        const uint64_t token = (arg >> 2) % 8;
        if ((arg & 0x80) == 0) {  // straight to the store
          engine.Raise(KeyName(key), token, [](const auto&, auto) {});
          break;
        }
        // As the admin listener does it: through the key's queue.
        m.fences.push_back(AdminFence{key, token, m.writes.size(), m.TurnOf(key)});
        queue.Fence(KeyName(key), token,
                    [&] { store.Raise(KeyName(key), token, [](const auto&, auto) {}); });
        break;
      }
      case 3:  // an upstream exchange ends
        poll();
        if (!m.held.empty()) release(arg % m.held.size());
        break;
      case 4:
        poll();
        break;
    }
  }
  // The end: every exchange ends and every answer arrives, until all is quiet.
  for (;;) {
    poll();
    if (!m.held.empty()) {
      release(0);
    } else if (store.held_count() > 0) {
      m.Answer(0, false);
    } else {
      break;
    }
  }
  for (const auto& w : m.writes) FUZZ_CHECK(w.verdict);
  FUZZ_CHECK(queue.waiting() == 0 && queue.active_keys() == 0);
  return 0;
}
