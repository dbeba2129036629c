// Fuzz target: sequences of fenced writes through the real FenceFilter and
// KeyQueue (SPEC section 1, steps 3-4), against a store whose answers the
// fuzzer delivers in any order across keys (each key's in call order, as
// token_store.h requires), failing some, and an upstream exchange whose end
// (the lease's release) the fuzzer also chooses.
//
// The input is a list of operations, two bytes each:
//   write   key 0..3, token 0..7, enforce or shadow mode
//   answer  deliver one pending store answer (any key's), ok or failed
//   raise   the admin fence raise on a key, straight to the store
//   release end one forwarded write's upstream exchange
//   poll    run the handlers that are ready
// and at the end every exchange ends and every answer is delivered.
//
// Invariants checked (a violation traps):
//  - per key, at most one write holds the key at a time (mutual exclusion);
//  - per key, Advances reach the store in arrival order, and forwarded
//    writes get their verdicts in arrival order (FIFO), after every earlier
//    write of the key had its verdict; each write gets exactly one verdict,
//    and nothing waits once all is delivered;
//  - enforce mode forwards iff the store accepted (token >= the highest
//    accepted or raised before it, in the store's order) and answers 409
//    with that highest value otherwise, 503 when the store failed, and 503
//    too_many_waiting only with max_waiting_per_key writes already waiting;
//  - shadow mode always forwards; a refused verdict holds no lease.

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "proxy/fence_filter.h"
#include "proxy/key_queue.h"
#include "tests/fuzz/fuzz_util.h"

namespace fencegate::fuzz {
namespace {

constexpr size_t kMaxWaiting = 2;
constexpr int kKeys = 4;

// A TokenStore whose answers wait until the fuzzer delivers them.
class HeldStore : public storage::TokenStore {
 public:
  struct Pending {
    std::string key;
    uint64_t token;
    FenceHandler handler;
  };
  std::vector<Pending> pending;
  std::map<std::string, uint64_t> stored;

  void Advance(std::string key, uint64_t token, FenceHandler h) override {
    pending.push_back({std::move(key), token, std::move(h)});
  }
  void AdvanceAll(std::vector<storage::KeyToken>, BatchFenceHandler h) override {
    FUZZ_CHECK(false);  // this target makes single-key writes only
  }
  void Raise(std::string key, uint64_t token, FenceHandler h) override {
    uint64_t& cur = stored[key];
    cur = std::max(cur, token);
    h({}, storage::Fence{true, cur});
  }
  void Get(std::string key, GetHandler h) override {
    auto it = stored.find(key);
    h({}, it == stored.end() ? std::nullopt : std::optional<uint64_t>(it->second));
  }
  storage::Status Health() const override { return {}; }
  storage::Status Close() override { return {}; }

  // Index of the oldest pending Advance of pending[i]'s key: the one a store
  // that decides in call order answers next for that key.
  size_t OldestOfKey(size_t i) const {
    for (size_t j = 0; j < i; ++j) {
      if (pending[j].key == pending[i].key) return j;
    }
    return i;
  }
  // Decides and delivers pending[i].
  void Answer(size_t i, bool fail) {
    Pending p = std::move(pending[i]);
    pending.erase(pending.begin() + static_cast<ptrdiff_t>(i));
    if (fail) return p.handler(storage::Status::IoError("fuzz"), {});
    uint64_t& cur = stored[p.key];
    storage::Fence f;
    f.accepted = p.token >= cur;
    if (f.accepted) cur = p.token;
    f.current = cur;
    p.handler({}, f);
  }
};

struct Write {
  int key;
  uint64_t token;
  bool shadow;
  bool verdict = false;
};

struct Model {
  std::vector<Write> writes;
  std::deque<size_t> order[kKeys];     // writes of each key without a verdict, in arrival order
  std::deque<size_t> in_store[kKeys];  // writes of each key whose Advance awaits its answer
  // Forwarded writes whose upstream exchange has not ended: key, lease.
  std::vector<std::pair<int, proxy::KeyLease>> held;
  std::map<size_t, bool> failed;              // write -> its store answer failed (once answered)
  std::map<size_t, uint64_t> expect_current;  // write -> the stored max before its answer
  HeldStore* store = nullptr;

  // The store answers the oldest pending Advance of pending[idx]'s key:
  // note what the model expects for the write it belongs to.
  void Answer(size_t idx, bool fail) {
    idx = store->OldestOfKey(idx);
    const std::string key_name = store->pending[idx].key;
    int key = key_name.back() - '0';
    FUZZ_CHECK(!in_store[key].empty());
    size_t id = in_store[key].front();
    in_store[key].pop_front();
    FUZZ_CHECK(writes[id].token == store->pending[idx].token);  // Advances in arrival order
    failed[id] = fail;
    auto it = store->stored.find(key_name);
    expect_current[id] = it == store->stored.end() ? 0 : it->second;
    store->Answer(idx, fail);
  }
};

std::string KeyName(int k) { return "/objects/k" + std::to_string(k); }

void OnVerdict(Model& m, size_t id, size_t waiting_before, proxy::FenceVerdict v) {
  Write& w = m.writes[id];
  FUZZ_CHECK(!w.verdict);
  w.verdict = true;
  auto& q = m.order[w.key];
  if (v.outcome == "overloaded") {
    FUZZ_CHECK(!w.shadow && !v.forward && !v.lease.held());
    FUZZ_CHECK(waiting_before >= kMaxWaiting);
    FUZZ_CHECK(v.reply && v.reply->result_int() == 503);
    FUZZ_CHECK(!m.failed.count(id));  // never reached the store
    q.erase(std::find(q.begin(), q.end(), id));
    return;
  }
  FUZZ_CHECK(m.failed.count(id) == 1);  // the store answered this write
  if (v.forward) {
    FUZZ_CHECK(!q.empty() && q.front() == id);  // FIFO per key
    q.pop_front();
  } else {
    q.erase(std::find(q.begin(), q.end(), id));  // a refusal needs no turn
  }
  if (w.shadow) {
    FUZZ_CHECK(v.forward && !v.reply);
  } else if (m.failed[id]) {
    FUZZ_CHECK(!v.forward && v.outcome == "store_unavailable" && v.reply->result_int() == 503);
  } else {
    bool accepted = w.token >= m.expect_current[id];
    FUZZ_CHECK(v.forward == accepted);
    if (!accepted) {
      FUZZ_CHECK(v.outcome == "stale" && v.reply->result_int() == 409);
      FUZZ_CHECK(v.current == m.expect_current[id]);
    }
  }
  if (!v.forward) {
    FUZZ_CHECK(!v.lease.held());
    return;
  }
  FUZZ_CHECK(v.lease.held());
  for (const auto& h : m.held) FUZZ_CHECK(h.first != w.key);  // one holder per key
  m.held.emplace_back(w.key, std::move(v.lease));
}

}  // namespace
}  // namespace fencegate::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fencegate::fuzz;
  namespace proxy = fencegate::proxy;
  boost::asio::io_context ioc;
  HeldStore store;
  proxy::KeyQueue queue(kMaxWaiting);
  proxy::FenceFilter filter(store, queue);
  Model m;
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
        Write w{arg % kKeys, static_cast<uint64_t>((arg >> 2) % 8), (arg & 0x80) != 0};
        size_t id = m.writes.size();
        m.writes.push_back(w);
        m.order[w.key].push_back(id);
        proxy::WriteIntent intent;
        intent.kind = proxy::WriteIntent::Kind::kFence;
        intent.key = KeyName(w.key);
        intent.token = w.token;
        intent.shadow = w.shadow;
        size_t waiting_before = queue.waiting();
        size_t pending_before = store.pending.size();
        filter.Check(intent, ioc.get_executor(), [&m, id, waiting_before](proxy::FenceVerdict v) {
          OnVerdict(m, id, waiting_before, std::move(v));
        });
        // The Advance is made inside Check, unless the key's queue was full.
        if (store.pending.size() == pending_before + 1) {
          FUZZ_CHECK(store.pending.back().key == intent.key);
          m.in_store[w.key].push_back(id);
        } else {
          FUZZ_CHECK(store.pending.size() == pending_before);
        }
        break;
      }
      case 1:  // a store answer, any pending one, ok or failed
        if (!store.pending.empty()) m.Answer(arg % store.pending.size(), (arg & 0x80) != 0);
        break;
      case 2:  // the admin fence raise
        store.Raise(KeyName(arg % kKeys), (arg >> 2) % 8, [](const auto&, auto) {});
        break;
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
    } else if (!store.pending.empty()) {
      m.Answer(0, false);
    } else {
      break;
    }
  }
  for (const auto& w : m.writes) FUZZ_CHECK(w.verdict);
  FUZZ_CHECK(queue.waiting() == 0 && queue.active_keys() == 0);
  return 0;
}
