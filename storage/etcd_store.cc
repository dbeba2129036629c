#include "storage/etcd_store.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <unordered_set>
#include <utility>

#include "storage/etcd_client.h"

namespace fencegate::storage {

using nlohmann::json;

namespace {

constexpr auto kProbeInterval = std::chrono::seconds(1);
constexpr int kSeveralAttempts = 16;  // reads and compares of one AdvanceAll

json Put(const std::string& key64, const std::string& value64) {
  return {{"requestPut", {{"key", key64}, {"value", value64}}}};
}
json Range(const std::string& key64) { return {{"requestRange", {{"key", key64}}}}; }

// The nested transaction of one check-and-advance: create, raise, or read.
json AdvanceTxn(const std::string& key64, const std::string& value64) {
  json if_lower = {{"compare", json::array({{{"key", key64},
                                             {"target", "VALUE"},
                                             {"result", "LESS"},
                                             {"value", value64}}})},
                   {"success", json::array({Put(key64, value64)})},
                   {"failure", json::array({Range(key64)})}};
  return {{"requestTxn",
           {{"compare", json::array({{{"key", key64},
                                      {"target", "CREATE"},
                                      {"result", "EQUAL"},
                                      {"create_revision", "0"}}})},
            {"success", json::array({Put(key64, value64)})},
            {"failure", json::array({{{"requestTxn", if_lower}}})}}}};
}

// The value a range answer holds (nullopt: no such key); false when it is
// not a token.
bool ValueOf(const json& range, std::optional<uint64_t>* out) {
  out->reset();
  auto kvs = range.find("kvs");
  if (kvs == range.end() || kvs->empty()) return true;
  std::string text;
  if (!EtcdClient::FromBase64((*kvs)[0].value("value", std::string()), &text)) return false;
  uint64_t token = 0;
  if (!EtcdStore::DecodeToken(text, &token)) return false;
  *out = token;
  return true;
}


}  // namespace

Status EtcdStore::Malformed(std::string_view what) {
  return Status::Corruption("etcd answered something that is not " + std::string(what));
}

std::string EtcdStore::EncodeToken(uint64_t token) {
  std::string digits = std::to_string(token);
  return std::string(20 - digits.size(), '0') + digits;
}

bool EtcdStore::DecodeToken(std::string_view text, uint64_t* token) {
  if (text.size() != 20) return false;
  uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    const auto digit = static_cast<uint64_t>(c - '0');
    if (value > (UINT64_MAX - digit) / 10) return false;
    value = value * 10 + digit;
  }
  *token = value;
  return true;
}

EtcdStore::EtcdStore(std::unique_ptr<EtcdTransport> transport, EtcdStoreOptions options)
    : transport_(std::move(transport)), options_(std::move(options)) {
  lane_ = std::thread([this] { Lane(); });
}

EtcdStore::~EtcdStore() { (void)EtcdStore::Close(); }

std::string EtcdStore::KeyOf(std::string_view key) const {
  std::string out = options_.prefix;
  out.append("t/").append(key);
  return out;
}

void EtcdStore::Enqueue(Call call) {
  const Deadline deadline = std::chrono::steady_clock::now() + options_.decision_timeout;
  std::visit([deadline](auto& c) { c.deadline = deadline; }, call);
  {
    std::lock_guard lock(mu_);
    if (!stopping_) {
      queue_.push_back(std::move(call));
      cv_.notify_one();
      return;
    }
  }
  Answer(call, Status::Unavailable("token store is closed"));
}

void EtcdStore::Answer(Call& call, const Status& status) {
  if (auto* s = std::get_if<Single>(&call)) {
    if (s->kind == Single::Kind::kGet) return s->get(status, std::nullopt);
    return s->fence(status, Fence{});
  }
  if (auto* r = std::get_if<Record>(&call)) {
    if (r->reserve) return r->reserve(status, Reservation{});
    if (r->change) return r->change(status, false);
    return r->lookup(status, std::nullopt);
  }
  if (auto* t = std::get_if<Tree>(&call)) {
    if (t->node) return t->node(status, std::nullopt);
    return t->handler(status, TreeVerdict{});
  }
  std::get<Several>(call).handler(status, BatchFence{});
}

bool EtcdStore::Expired(Call& call) {
  const Deadline deadline = std::visit([](const auto& c) { return c.deadline; }, call);
  if (std::chrono::steady_clock::now() < deadline) {
    call_deadline_ = deadline;
    return false;
  }
  Answer(call, Status::Unavailable(
                   "no decision from etcd within storage.etcd.decision_timeout (" +
                   std::to_string(options_.decision_timeout.count()) + " ms)"));
  return true;
}

template <typename T>
void EtcdStore::DropExpired(std::vector<T>& batch) {
  std::vector<T> live;
  live.reserve(batch.size());
  Deadline earliest = Deadline::max();
  for (T& item : batch) {
    Call call(std::move(item));
    if (Expired(call)) continue;
    earliest = std::min(earliest, call_deadline_);
    live.push_back(std::get<T>(std::move(call)));
  }
  batch = std::move(live);
  call_deadline_ = earliest;
}

Status EtcdStore::CallEtcd(std::string_view path, const json& request, json* response,
                           bool retry_if_unknown) {
  return transport_->Call(path, request, response, retry_if_unknown, call_deadline_);
}

void EtcdStore::Advance(std::string key, uint64_t token, FenceHandler handler) {
  if (Status s = CheckTokenKey(key, kMaxKeyBytes); !s.ok()) return handler(s, Fence{});
  Enqueue(Single{Single::Kind::kAdvance, std::move(key), token, std::move(handler), {}});
}

void EtcdStore::Raise(std::string key, uint64_t token, FenceHandler handler) {
  if (Status s = CheckTokenKey(key, kMaxKeyBytes); !s.ok()) return handler(s, Fence{});
  Enqueue(Single{Single::Kind::kRaise, std::move(key), token, std::move(handler), {}});
}

void EtcdStore::Get(std::string key, GetHandler handler) {
  if (Status s = CheckTokenKey(key, kMaxKeyBytes); !s.ok()) return handler(s, std::nullopt);
  Enqueue(Single{Single::Kind::kGet, std::move(key), 0, {}, std::move(handler)});
}

void EtcdStore::AdvanceAll(std::vector<KeyToken> items, BatchFenceHandler handler) {
  if (Status s = CheckBatchItems(items, kMaxKeyBytes); !s.ok()) return handler(s, BatchFence{});
  Enqueue(Several{std::move(items), std::move(handler)});
}

Status EtcdStore::Health() const {
  std::lock_guard lock(mu_);
  return health_;
}

void EtcdStore::SetHealth(const Status& status) {
  std::lock_guard lock(mu_);
  health_ = status;
}

Status EtcdStore::Close() {
  std::lock_guard close_lock(close_mu_);
  if (closed_) return Status::Ok();
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  if (lane_.joinable()) lane_.join();
  closed_ = true;
  return Status::Ok();
}

// ---------------------------------------------------------------------------
// The lane.

void EtcdStore::Lane() {
  std::unique_lock lock(mu_);
  auto last_call = Clock::now();
  for (;;) {
    const Clock::time_point now = Clock::now();
    RetryParked(now);
    if (queue_.empty()) {
      if (stopping_ && parked_.empty()) break;
      const Clock::time_point wake = std::min(NextWake(now), last_call + kProbeInterval);
      // Woken by a call: look at the queue. At the wake time: the lane's
      // own work (some of it due within an interval from now, so the time
      // is not computed again).
      if (wake > now && !stopping_ && cv_.wait_until(lock, wake) == std::cv_status::no_timeout) {
        continue;
      }
      lock.unlock();
      Maintain();
      if (Clock::now() - last_call >= kProbeInterval) Probe();
      last_call = Clock::now();
      lock.lock();
      continue;
    }
    // A call that must wait behind a call of its keys that waits for
    // another replica to give a key up (ownership) waits with it.
    if (MustWait(queue_.front())) {
      Call call = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      Park(std::move(call), "one that a write before this one waits for");
      lock.lock();
      continue;
    }
    if (std::holds_alternative<Several>(queue_.front()) ||
        std::holds_alternative<Record>(queue_.front()) ||
        (std::holds_alternative<Tree>(queue_.front()) && std::get<Tree>(queue_.front()).node)) {
      // A call that runs alone.
      Call call = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      if (!Expired(call)) {
        if (auto* several = std::get_if<Several>(&call)) {
          RunSeveral(*several);
        } else if (auto* record = std::get_if<Record>(&call)) {
          RunRecord(*record);
        } else {
          RunNodeRead(std::get<Tree>(call));
        }
      }
    } else if (std::holds_alternative<Tree>(queue_.front())) {
      // The run of tree writes at the front: at most max_batch of them, and
      // as many as one transaction reads (their keys and their paths' nodes,
      // TreeNodePaths, each read once however many writes share it).
      std::vector<Tree> batch;
      std::unordered_set<std::string> read;
      size_t owned_reads = 0;
      while (!queue_.empty() && batch.size() < options_.max_batch) {
        auto* next = std::get_if<Tree>(&queue_.front());
        if (next == nullptr || next->node || MustWait(queue_.front())) break;
        std::vector<std::string> more;
        for (const std::string& k : next->write.keys) {
          if (!read.contains(KeyOf(k))) more.push_back(KeyOf(k));
        }
        for (const std::string& p : TreeNodePaths(next->write)) {
          if (!read.contains(NodeKeyOf(p))) more.push_back(NodeKeyOf(p));
        }
        std::sort(more.begin(), more.end());
        more.erase(std::unique(more.begin(), more.end()), more.end());
        // Ownership reads at most an owner key per key and target more
        // (counted, not spelt: this runs under the queue's lock).
        const size_t owners =
            options_.ownership.enabled ? next->write.keys.size() + next->write.targets.size() : 0;
        // Ownership's reads add up to two ranges (first segments, wants).
        const size_t most = kMaxTreeReads - (options_.ownership.enabled ? 2 : 0);
        if (!batch.empty() && read.size() + owned_reads + more.size() + owners > most) {
          break;
        }
        owned_reads += owners;
        read.insert(std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
        batch.push_back(std::move(*next));
        queue_.pop_front();
      }
      lock.unlock();
      DropExpired(batch);
      if (!batch.empty()) RunTrees(batch);
    } else {
      // The longest run of single-key calls at the front whose keys differ.
      std::vector<Single> batch;
      batch.reserve(options_.max_batch);  // no reallocation: `keys` views its strings
      std::unordered_set<std::string_view> keys;
      while (!queue_.empty() && batch.size() < options_.max_batch) {
        auto* single = std::get_if<Single>(&queue_.front());
        if (single == nullptr || keys.contains(single->key) || MustWait(queue_.front())) break;
        batch.push_back(std::move(*single));
        queue_.pop_front();
        keys.insert(batch.back().key);
      }
      lock.unlock();
      DropExpired(batch);
      if (!batch.empty()) RunBatch(batch);
    }
    Maintain();
    last_call = Clock::now();
    lock.lock();
  }
  lock.unlock();
  RevokeLease();
}

void EtcdStore::CountWrite(size_t requests, const Status& status, size_t written) {
  counts_.requests.fetch_add(requests, std::memory_order_relaxed);
  counts_.batches.fetch_add(1, std::memory_order_relaxed);
  counts_.writes.fetch_add(written, std::memory_order_relaxed);
  if (!status.ok()) counts_.write_errors.fetch_add(1, std::memory_order_relaxed);
}

std::optional<StoreCounters> EtcdStore::Counters() const {
  return StoreCounters{.requests = counts_.requests.load(std::memory_order_relaxed),
                       .batches = counts_.batches.load(std::memory_order_relaxed),
                       .writes = counts_.writes.load(std::memory_order_relaxed),
                       .write_errors = counts_.write_errors.load(std::memory_order_relaxed),
                       .syncs = std::nullopt,        // etcd makes its own writes durable
                       .recoveries = std::nullopt,   // and recovers by itself
                       .ownership = options_.ownership.enabled
                                        ? std::optional<OwnershipCounters>(OwnershipCounters{
                                              .keys_owned = counts_.keys_owned.load(),
                                              .takes = counts_.takes.load(),
                                              .releases = counts_.releases.load(),
                                              .lost = counts_.lost.load(),
                                              .waits = counts_.waits.load()})
                                        : std::nullopt};
}

namespace {

// Owning the key: one nested transaction around AdvanceTxn. If this
// replica's lease owns it, advance; else if nobody does, take it and
// advance; else read who does.
json OwnedAdvanceTxn(const std::string& owner64, const std::string& name64,
                     const std::string& lease, json advance) {
  json take = {
      {"compare", json::array({{{"key", owner64},
                                {"target", "LEASE"},
                                {"result", "EQUAL"},
                                {"lease", "0"}}})},
      {"success",
       json::array({{{"requestPut", {{"key", owner64}, {"value", name64}, {"lease", lease}}}},
                    advance})},
      {"failure", json::array({Range(owner64)})}};
  return {{"requestTxn",
           {{"compare", json::array({{{"key", owner64},
                                      {"target", "LEASE"},
                                      {"result", "EQUAL"},
                                      {"lease", lease}}})},
            {"success", json::array({std::move(advance)})},
            {"failure", json::array({{{"requestTxn", std::move(take)}}})}}}};
}

// The i-th answer of a txn answer's responses, as `field` ("response_txn"),
// or an empty object.
json Nth(const json& txn, size_t i, const char* field) {
  const json& r = txn.value("responses", json::array());
  return r.size() > i ? r[i].value(field, json::object()) : json::object();
}

// The owner's name in a range answer of an owner key.
std::string OwnerName(const json& range) {
  auto kvs = range.find("kvs");
  std::string name;
  if (kvs == range.end() || kvs->empty() ||
      !EtcdClient::FromBase64((*kvs)[0].value("value", std::string()), &name)) {
    return "unknown";
  }
  return name;
}

}  // namespace

void EtcdStore::RunBatch(std::vector<Single>& batch) {
  size_t requests = 0;  // Advance and Raise: the batch's writes
  size_t written = 0;   // of them, those that stored their token
  const bool owning = options_.ownership.enabled &&
                      std::any_of(batch.begin(), batch.end(), [](const Single& c) {
                        return c.kind == Single::Kind::kAdvance;
                      });
  Status status;
  int64_t lease = 0;
  if (owning) lease = EnsureLease(&status);
  const std::string lease_text = std::to_string(lease);
  json ops = json::array();
  std::vector<std::string> owners(batch.size());
  for (size_t i = 0; i < batch.size() && status.ok(); ++i) {
    const Single& call = batch[i];
    const std::string key64 = EtcdClient::Base64(KeyOf(call.key));
    if (call.kind == Single::Kind::kGet) {
      ops.push_back(Range(key64));
      continue;
    }
    ++requests;
    json advance = AdvanceTxn(key64, EtcdClient::Base64(EncodeToken(call.token)));
    if (owning && call.kind == Single::Kind::kAdvance && Forwarded(call.key)) {
      owners[i] = OwnerKeyOf(call.key);
      advance = OwnedAdvanceTxn(EtcdClient::Base64(owners[i]), owner_name64_, lease_text,
                                std::move(advance));
    }
    ops.push_back(std::move(advance));
  }
  // Others' wants, when due, ride along (no call of their own).
  const bool wants = owning && WantsDue();
  if (wants) ops.push_back({{"requestRange", WantsRange()}});
  json response;
  if (status.ok()) {
    status = CallEtcd("/v3/kv/txn", {{"success", ops}}, &response,
                      /*retry_if_unknown=*/true);
    SetHealth(status);
    if (owning) NoteFailure(status);
  }
  const json* responses = nullptr;
  if (status.ok()) {
    auto it = response.find("responses");
    if (it == response.end() || !it->is_array() || it->size() != batch.size() + (wants ? 1 : 0)) {
      status = Malformed("one answer per operation");
    } else {
      responses = &*it;
      if (wants) TakeWants(it->back().value("response_range", json::object()));
    }
  }
  // The writes are answered after they are counted, so that whoever sees
  // an answer (GET /metrics right after a response) sees its write counted.
  std::vector<std::pair<Status, Fence>> decided(batch.size());
  std::vector<std::string> moving(batch.size());  // another replica owns it: its name
  for (size_t i = 0; i < batch.size(); ++i) {
    Single& call = batch[i];
    if (!status.ok()) {
      if (call.kind == Single::Kind::kGet) {
        call.get(status, std::nullopt);
      } else {
        decided[i] = {status, Fence{}};
      }
      continue;
    }
    const json& answer = (*responses)[i];
    if (call.kind == Single::Kind::kGet) {
      std::optional<uint64_t> value;
      if (!answer.contains("response_range") || !ValueOf(answer["response_range"], &value)) {
        call.get(Malformed("a token"), std::nullopt);
      } else {
        call.get(Status::Ok(), value);
      }
      continue;
    }
    json created = answer.value("response_txn", json::object());
    if (!owners[i].empty()) {
      // Owned already, taken now, or another replica's.
      const json owned = created;
      if (EtcdClient::Succeeded(owned)) {
        created = Nth(owned, 0, "response_txn");
        Owned(owners[i], false);
      } else {
        const json take = Nth(owned, 0, "response_txn");
        if (!EtcdClient::Succeeded(take)) {
          moving[i] = OwnerName(Nth(take, 0, "response_range"));
          continue;
        }
        created = Nth(take, 1, "response_txn");
        Owned(owners[i], true);
      }
    }
    // Created, or raised from a lower value: the token is stored.
    Fence fence;
    fence.owner = owners[i].empty() ? 0 : lease;
    if (EtcdClient::Succeeded(created)) {
      fence.accepted = true;
      fence.current = call.token;
      ++written;
    } else {
      const json raised = Nth(created, 0, "response_txn");
      if (EtcdClient::Succeeded(raised)) {
        fence.accepted = true;
        fence.current = call.token;
        ++written;
      } else {
        const json& read = raised.value("responses", json::array());
        std::optional<uint64_t> stored;
        if (read.empty() || !read[0].contains("response_range") ||
            !ValueOf(read[0]["response_range"], &stored) || !stored || *stored < call.token) {
          decided[i] = {Malformed("a decided check-and-advance"), Fence{}};
          continue;
        }
        fence.current = *stored;
        fence.accepted = call.kind == Single::Kind::kRaise || *stored == call.token;
      }
    }
    decided[i] = {Status::Ok(), fence};
  }
  if (requests > 0) CountWrite(requests, status, written);
  for (size_t i = 0; i < batch.size(); ++i) {
    if (batch[i].kind == Single::Kind::kGet) continue;
    if (!moving[i].empty()) {
      Park(std::move(batch[i]), moving[i]);
      continue;
    }
    batch[i].fence(decided[i].first, decided[i].second);
  }
}

void EtcdStore::RunSeveral(Several& call) {
  counts_.requests.fetch_add(1, std::memory_order_relaxed);
  const size_t n = call.items.size();
  std::vector<std::string> keys64(n);
  for (size_t i = 0; i < n; ++i) keys64[i] = EtcdClient::Base64(KeyOf(call.items[i].key));
  // Ownership: each key's owner key, read with the keys and compared with
  // them; the free ones are taken in the same transaction.
  std::vector<std::string> owners;
  Status status;
  int64_t lease = 0;
  if (options_.ownership.enabled) {
    lease = EnsureLease(&status);
    if (!status.ok()) return call.handler(status, BatchFence{});
    for (const KeyToken& item : call.items) {
      if (Forwarded(item.key)) owners.push_back(OwnerKeyOf(item.key));
    }
  }
  for (int attempt = 0; attempt < kSeveralAttempts; ++attempt) {
    // Read every key (one transaction: one revision), decide, then write
    // only if none changed since.
    json reads = json::array();
    for (const std::string& k : keys64) reads.push_back(Range(k));
    for (const std::string& o : owners) reads.push_back(Range(EtcdClient::Base64(o)));
    json read;
    status = CallEtcd("/v3/kv/txn", {{"success", reads}}, &read, true);
    SetHealth(status);
    if (!status.ok()) break;
    const json& answers = read.value("responses", json::array());
    if (answers.size() != n + owners.size()) {
      status = Malformed("one answer per key");
      break;
    }
    BatchFence result;
    result.current.resize(n);
    result.owner = lease;
    json compares = json::array();
    json puts = json::array();
    bool bad = false;
    std::vector<bool> taken(owners.size(), false);
    for (size_t i = 0; i < owners.size() && !bad; ++i) {
      const json& range = answers[n + i].value("response_range", json::object());
      const std::string owner64 = EtcdClient::Base64(owners[i]);
      int64_t mod = 0;
      int64_t holder = 0;
      if (auto kvs = range.find("kvs"); kvs != range.end() && !kvs->empty()) {
        if (!EtcdClient::Int64Field((*kvs)[0], "mod_revision", &mod) ||
            !EtcdClient::Int64Field((*kvs)[0], "lease", &holder)) {
          bad = true;
          break;
        }
        if (holder != lease) return Park(std::move(call), OwnerName(range));
      } else {
        taken[i] = true;
        puts.push_back({{"requestPut",
                         {{"key", owner64},
                          {"value", owner_name64_},
                          {"lease", std::to_string(lease)}}}});
      }
      compares.push_back({{"key", owner64},
                          {"target", "MOD"},
                          {"result", "EQUAL"},
                          {"mod_revision", std::to_string(mod)}});
    }
    for (size_t i = 0; i < n && !bad; ++i) {
      const json& range = answers[i].value("response_range", json::object());
      std::optional<uint64_t> stored;
      if (!ValueOf(range, &stored)) {
        bad = true;
        break;
      }
      int64_t mod = 0;
      if (stored && !EtcdClient::Int64Field(range["kvs"][0], "mod_revision", &mod)) {
        bad = true;
        break;
      }
      compares.push_back({{"key", keys64[i]},
                          {"target", "MOD"},
                          {"result", "EQUAL"},
                          {"mod_revision", std::to_string(mod)}});
      const uint64_t token = call.items[i].token;
      result.current[i] = stored.value_or(0);
      if (stored && token < *stored && result.stale == SIZE_MAX) result.stale = i;
      if (!stored || token > *stored) {
        puts.push_back(Put(keys64[i], EtcdClient::Base64(EncodeToken(token))));
      }
    }
    if (bad) {
      status = Malformed("a token or an owner");
      break;
    }
    if (result.stale != SIZE_MAX) return call.handler(Status::Ok(), std::move(result));
    json written;
    status = CallEtcd("/v3/kv/txn", {{"compare", compares}, {"success", puts}},
                              &written, true);
    SetHealth(status);
    // Owner keys taken are no records of the store's.
    const size_t owners_taken = static_cast<size_t>(std::count(taken.begin(), taken.end(), true));
    CountWrite(0, status,
               status.ok() && EtcdClient::Succeeded(written) ? puts.size() - owners_taken : 0);
    if (!owners.empty()) NoteFailure(status);
    if (!status.ok()) break;
    if (!EtcdClient::Succeeded(written)) continue;  // another replica wrote one of them: again
    for (size_t i = 0; i < owners.size(); ++i) Owned(owners[i], taken[i]);
    result.accepted = true;
    for (size_t i = 0; i < n; ++i) {
      result.current[i] = std::max(result.current[i], call.items[i].token);
    }
    return call.handler(Status::Ok(), std::move(result));
  }
  if (status.ok()) status = Status::Busy("the keys kept changing under a write of several keys");
  call.handler(status, BatchFence{});
}

void EtcdStore::Probe() {
  json response;
  json request = {{"key", EtcdClient::Base64(KeyOf(""))}, {"limit", "1"}, {"keys_only", true}};
  SetHealth(transport_->Call("/v3/kv/range", request, &response, true,
                             std::chrono::steady_clock::now() + options_.decision_timeout));
}

}  // namespace fencegate::storage
