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
  auto last_call = std::chrono::steady_clock::now();
  for (;;) {
    if (queue_.empty()) {
      if (stopping_) return;
      if (cv_.wait_for(lock, kProbeInterval) == std::cv_status::timeout && queue_.empty() &&
          !stopping_ && std::chrono::steady_clock::now() - last_call >= kProbeInterval) {
        lock.unlock();
        Probe();
        lock.lock();
        last_call = std::chrono::steady_clock::now();
      }
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
      while (!queue_.empty() && batch.size() < options_.max_batch) {
        auto* next = std::get_if<Tree>(&queue_.front());
        if (next == nullptr || next->node) break;
        std::vector<std::string> more;
        for (const std::string& k : next->write.keys) {
          if (!read.contains(KeyOf(k))) more.push_back(KeyOf(k));
        }
        for (const std::string& p : TreeNodePaths(next->write)) {
          if (!read.contains(NodeKeyOf(p))) more.push_back(NodeKeyOf(p));
        }
        std::sort(more.begin(), more.end());
        more.erase(std::unique(more.begin(), more.end()), more.end());
        if (!batch.empty() && read.size() + more.size() > kMaxTreeReads) break;
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
        if (single == nullptr || keys.contains(single->key)) break;
        batch.push_back(std::move(*single));
        queue_.pop_front();
        keys.insert(batch.back().key);
      }
      lock.unlock();
      DropExpired(batch);
      if (!batch.empty()) RunBatch(batch);
    }
    last_call = std::chrono::steady_clock::now();
    lock.lock();
  }
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
                       .recoveries = std::nullopt};  // and recovers by itself
}

void EtcdStore::RunBatch(std::vector<Single>& batch) {
  size_t requests = 0;  // Advance and Raise: the batch's writes
  size_t written = 0;   // of them, those that stored their token
  json ops = json::array();
  std::vector<std::string> keys64;
  keys64.reserve(batch.size());
  for (const Single& call : batch) {
    keys64.push_back(EtcdClient::Base64(KeyOf(call.key)));
    if (call.kind == Single::Kind::kGet) {
      ops.push_back(Range(keys64.back()));
    } else {
      ops.push_back(AdvanceTxn(keys64.back(), EtcdClient::Base64(EncodeToken(call.token))));
      ++requests;
    }
  }
  json response;
  Status status = CallEtcd("/v3/kv/txn", {{"success", ops}}, &response,
                                   /*retry_if_unknown=*/true);
  SetHealth(status);
  const json* responses = nullptr;
  if (status.ok()) {
    auto it = response.find("responses");
    if (it == response.end() || !it->is_array() || it->size() != batch.size()) {
      status = Malformed("one answer per operation");
    } else {
      responses = &*it;
    }
  }
  // The writes are answered after they are counted, so that whoever sees
  // an answer (GET /metrics right after a response) sees its write counted.
  std::vector<std::pair<Status, Fence>> decided(batch.size());
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
    // Created, or raised from a lower value: the token is stored.
    const json& created = answer.value("response_txn", json::object());
    Fence fence;
    if (EtcdClient::Succeeded(created)) {
      fence = {true, call.token};
      ++written;
    } else {
      const json& inner = created.value("responses", json::array());
      const json raised = inner.empty() ? json::object()
                                        : inner[0].value("response_txn", json::object());
      if (EtcdClient::Succeeded(raised)) {
        fence = {true, call.token};
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
    if (batch[i].kind != Single::Kind::kGet) batch[i].fence(decided[i].first, decided[i].second);
  }
}

void EtcdStore::RunSeveral(Several& call) {
  counts_.requests.fetch_add(1, std::memory_order_relaxed);
  const size_t n = call.items.size();
  std::vector<std::string> keys64(n);
  for (size_t i = 0; i < n; ++i) keys64[i] = EtcdClient::Base64(KeyOf(call.items[i].key));
  Status status;
  for (int attempt = 0; attempt < kSeveralAttempts; ++attempt) {
    // Read every key (one transaction: one revision), decide, then write
    // only if none changed since.
    json reads = json::array();
    for (const std::string& k : keys64) reads.push_back(Range(k));
    json read;
    status = CallEtcd("/v3/kv/txn", {{"success", reads}}, &read, true);
    SetHealth(status);
    if (!status.ok()) break;
    const json& answers = read.value("responses", json::array());
    if (answers.size() != n) {
      status = Malformed("one answer per key");
      break;
    }
    BatchFence result;
    result.current.resize(n);
    json compares = json::array();
    json puts = json::array();
    bool bad = false;
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
      status = Malformed("a token");
      break;
    }
    if (result.stale != SIZE_MAX) return call.handler(Status::Ok(), std::move(result));
    json written;
    status = CallEtcd("/v3/kv/txn", {{"compare", compares}, {"success", puts}},
                              &written, true);
    SetHealth(status);
    CountWrite(0, status, status.ok() && EtcdClient::Succeeded(written) ? puts.size() : 0);
    if (!status.ok()) break;
    if (!EtcdClient::Succeeded(written)) continue;  // another replica wrote one of them: again
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
