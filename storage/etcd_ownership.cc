// EtcdStore's ownership of keys between replicas (etcd_store.h,
// "Ownership"): the lease, its keep-alive, the release of idle keys, and
// the calls that wait for another replica to give a key up.

#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <iterator>
#include <set>
#include <string>
#include <utility>

#include "storage/etcd_client.h"
#include "storage/etcd_store.h"

namespace fencegate::storage {

using nlohmann::json;

namespace {

// How often calls that wait for another replica's key are tried again, and
// how often a replica that owns keys looks for replicas waiting for one.
constexpr auto kRetryInterval = std::chrono::milliseconds(25);
constexpr auto kWantPollInterval = std::chrono::milliseconds(25);
// The most a call of the lane's own (keep-alive, wants, releases) may hold
// it: the decisions queued behind it must not run out of time.
constexpr auto kBackgroundCallTimeout = std::chrono::seconds(1);

int64_t Nanos(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// "/" for the root, else "/" and the path's first segment.
std::string_view FirstSegment(std::string_view path) {
  const size_t end = path.find('/', 1);
  return end == std::string_view::npos ? path : path.substr(0, end);
}

std::string DefaultName() {
  std::array<char, 256> host{};
  if (::gethostname(host.data(), host.size() - 1) != 0) host[0] = '\0';
  return std::string(host.data()) + ":" + std::to_string(::getpid());
}

}  // namespace

EtcdStore::Clock::duration EtcdStore::BackgroundTimeout() const {
  return std::min<Clock::duration>(options_.decision_timeout, kBackgroundCallTimeout);
}

std::string EtcdStore::OwnerKeyOf(std::string_view key) const {
  std::string out = options_.prefix;
  out.append("o/k/").append(key);
  return out;
}

void EtcdStore::TreeOwners(const TreeWrite& write, std::vector<std::string>* owned,
                           std::vector<std::string>* checked) const {
  // An administrative raise (import, the admin fence, entering the tree)
  // forwards nothing: it needs no key of its own.
  if (write.raise) return;
  for (const std::string& k : write.keys) {
    if (Forwarded(k)) owned->push_back(OwnerKeyOf(k));
  }
  const std::string subtree_root = options_.prefix + "o/s";
  for (const TreeTarget& t : write.targets) {
    // Only one counter for a whole tree (nesting: shared) orders writes of
    // different paths; under per_key, DecideTree refuses a subtree write
    // over paths fenced under other keys, whichever replica took them.
    if (t.nesting != Nesting::kShared) continue;
    if (t.path == "/" && t.subtree) {
      owned->push_back(subtree_root);
      checked->push_back(options_.prefix + "o/p");  // the range of first segments
      continue;
    }
    std::string name = options_.prefix + "o/p";
    name.append(FirstSegment(t.path));
    owned->push_back(std::move(name));
    checked->push_back(subtree_root);
  }
  auto dedupe = [](std::vector<std::string>* v) {
    std::sort(v->begin(), v->end());
    v->erase(std::unique(v->begin(), v->end()), v->end());
  };
  dedupe(owned);
  dedupe(checked);
}

bool EtcdStore::Forwardable(int64_t owner) const {
  if (owner == 0) return true;
  const int64_t margin = std::chrono::duration_cast<std::chrono::nanoseconds>(
                             options_.ownership.margin)
                             .count();
  if (live_lease_.load() != owner) return false;
  return Nanos(Clock::now()) + margin < live_until_ns_.load();
}

void EtcdStore::Disown(std::string_view key) {
  if (!options_.ownership.enabled) return;
  // No wake-up: the lane notes idle keys after each batch, and while idle
  // within a poll interval (NextWake), soon enough for a want.
  std::lock_guard lock(idle_mu_);
  idle_.emplace_back(Clock::now(), std::string(key));
}

int64_t EtcdStore::EnsureLease(Status* status) {
  if (lease_ != 0 && LeaseShort()) {
    // The last keep-alive failed (etcd down or unreachable), or by this
    // replica's clock the lease is within its margin of its end: a write
    // decided under it could not be forwarded. Renew it first, within the
    // decision's deadline; if etcd ended it meanwhile, a new one is taken
    // below.
    const Deadline decision = call_deadline_;
    KeepAlive(decision > Clock::now() ? decision : Deadline::max());
    call_deadline_ = decision;
    if (lease_ != 0 && LeaseShort()) {
      *status = Status::Unavailable("etcd did not renew this replica's lease");
      return 0;
    }
  }
  if (lease_ != 0) return lease_;
  if (owner_name64_.empty()) {
    owner_name64_ = EtcdClient::Base64(options_.ownership.name.empty() ? DefaultName()
                                                                      : options_.ownership.name);
  }
  const auto ttl_s = std::max<int64_t>(
      1, std::chrono::duration_cast<std::chrono::seconds>(options_.ownership.lease_ttl).count());
  const Clock::time_point sent = Clock::now();
  json answer;
  *status = CallEtcd("/v3/lease/grant", {{"TTL", std::to_string(ttl_s)}}, &answer,
                     /*retry_if_unknown=*/true);
  SetHealth(*status);
  if (!status->ok()) return 0;
  int64_t id = 0;
  int64_t ttl = 0;
  if (!EtcdClient::Int64Field(answer, "ID", &id) || id == 0 ||
      !EtcdClient::Int64Field(answer, "TTL", &ttl) || ttl <= 0) {
    *status = Malformed("a granted lease");
    return 0;
  }
  lease_ = id;
  keepalive_ok_ = true;
  lease_ttl_ = std::chrono::seconds(ttl);
  lease_sent_ = sent;
  next_keepalive_ = sent + lease_ttl_ / 4;
  live_until_ns_.store(Nanos(sent + lease_ttl_));
  live_lease_.store(id);
  return id;
}

bool EtcdStore::LeaseShort() const {
  return !keepalive_ok_ || Clock::now() + options_.ownership.margin >=
                               Clock::time_point(std::chrono::nanoseconds(live_until_ns_.load()));
}

void EtcdStore::KeepAlive(Deadline cap) {
  const Clock::time_point sent = Clock::now();
  // A keep-alive that comes later than the margin is no use.
  call_deadline_ =
      std::min(cap, sent + std::min<Clock::duration>(BackgroundTimeout(), lease_ttl_ / 2));
  json answer;
  const Status status = CallEtcd("/v3/lease/keepalive", {{"ID", std::to_string(lease_)}},
                                 &answer, /*retry_if_unknown=*/true);
  SetHealth(status);
  keepalive_ok_ = status.ok();
  if (!status.ok()) {
    next_keepalive_ = Clock::now() + lease_ttl_ / 16;  // soon again
    return;
  }
  next_keepalive_ = sent + lease_ttl_ / 4;
  const json& result = answer.value("result", answer);
  int64_t ttl = 0;
  if (EtcdClient::Int64Field(result, "TTL", &ttl) && ttl > 0) {
    lease_sent_ = sent;
    live_until_ns_.store(Nanos(sent + std::chrono::seconds(ttl)));
    return;
  }
  LeaseEnded();
}

void EtcdStore::LeaseEnded() {
  // etcd ended the lease (this replica was cut off or paused longer than
  // its TTL): every key it owned may be another's by now.
  counts_.lost.fetch_add(owned_.size(), std::memory_order_relaxed);
  ForgetLease();
}

void EtcdStore::ForgetLease() {
  live_lease_.store(0);
  owned_.clear();
  idle_names_.clear();
  my_wants_.clear();  // under the lease: gone with it
  counts_.keys_owned.store(0, std::memory_order_relaxed);
  lease_ = 0;
}

void EtcdStore::NoteFailure(const Status& status) {
  // etcd refuses a put under a lease it has ended ("requested lease not
  // found"): the next call takes a new one rather than waiting for the
  // keep-alive to learn it.
  if (lease_ != 0 && status.code() == Status::Code::kNotFound) LeaseEnded();
}

void EtcdStore::Owned(const std::string& name, bool taken) {
  OwnedKey& owned = owned_[name];
  owned.last_use = Clock::now();
  owned.idle_since = Clock::time_point{};  // busy
  if (taken) counts_.takes.fetch_add(1, std::memory_order_relaxed);
  counts_.keys_owned.store(owned_.size(), std::memory_order_relaxed);
}

std::string EtcdStore::WantKeyOf(std::string_view owner) const {
  std::string out = options_.prefix;
  out.append("w/").append(owner.substr(options_.prefix.size()));
  return out;
}

void EtcdStore::NoteIdle() {
  std::deque<std::pair<Clock::time_point, std::string>> idle;
  {
    std::lock_guard lock(idle_mu_);
    idle.swap(idle_);
  }
  // An owner key is idle from the moment its key went idle, unless a call
  // that owns it was decided since (a write of it is in flight again).
  auto note = [this](const std::string& name, Clock::time_point idle_at) {
    auto it = owned_.find(name);
    if (it == owned_.end() || it->second.last_use >= idle_at) return;
    if (it->second.idle_since != Clock::time_point{}) return;  // idle already
    it->second.idle_since = idle_at;
    idle_names_.emplace_back(idle_at, name);
  };
  for (const auto& [idle_at, key] : idle) {
    if (!IsTreeKey(key)) {
      note(OwnerKeyOf(key), idle_at);
      continue;
    }
    // A collection's node: its first segment's owner once no tree write
    // below it is left; the root's once no tree write at all is.
    const std::string_view path = std::string_view(key).substr(kTreeKeyPrefix.size());
    if (path == "/") {
      note(options_.prefix + "o/s", idle_at);
      note(options_.prefix + "o/p/", idle_at);
    } else if (FirstSegment(path) == path) {
      note(options_.prefix + "o/p" + std::string(path), idle_at);
    }
  }
}

bool EtcdStore::WantsDue() const {
  return !owned_.empty() && Clock::now() >= next_want_poll_;
}

json EtcdStore::WantsRange() const {
  return {{"key", EtcdClient::Base64(options_.prefix + "w/")},
          {"range_end", EtcdClient::Base64(options_.prefix + "w0")},
          {"keys_only", true}};
}

void EtcdStore::PollWants() {
  call_deadline_ = Clock::now() + BackgroundTimeout();
  json answer;
  const Status status = CallEtcd("/v3/kv/range", WantsRange(), &answer, true);
  SetHealth(status);
  if (status.ok()) TakeWants(answer);
}

void EtcdStore::TakeWants(const json& answer) {
  next_want_poll_ = Clock::now() + kWantPollInterval;
  const std::string from = options_.prefix + "w/";
  wanted_.clear();
  for (const json& kv : answer.value("kvs", json::array())) {
    int64_t holder = 0;
    std::string key;
    if (!EtcdClient::Int64Field(kv, "lease", &holder) || holder == lease_ ||
        !EtcdClient::FromBase64(kv.value("key", std::string()), &key) || !key.starts_with(from)) {
      continue;
    }
    wanted_.insert(options_.prefix + key.substr(from.size()));
  }
}

void EtcdStore::PublishWants() {
  // The wants of calls that no longer wait are taken back.
  std::vector<std::string> done;
  {
    std::lock_guard lock(mu_);
    for (const std::string& name : my_wants_) {
      if (!parked_keys_.contains(name)) done.push_back(name);
    }
  }
  std::vector<std::string> fresh;
  for (std::string& name : new_wants_) {
    if (!my_wants_.contains(name)) fresh.push_back(std::move(name));
  }
  new_wants_.clear();
  std::sort(fresh.begin(), fresh.end());
  fresh.erase(std::unique(fresh.begin(), fresh.end()), fresh.end());
  if (fresh.empty() && done.empty()) return;
  Status status;
  if (!fresh.empty() && EnsureLease(&status) == 0) return;
  json ops = json::array();
  for (const std::string& name : fresh) {
    ops.push_back({{"requestPut",
                    {{"key", EtcdClient::Base64(WantKeyOf(name))},
                     {"value", owner_name64_},
                     {"lease", std::to_string(lease_)}}}});
  }
  for (const std::string& name : done) {
    ops.push_back({{"requestDeleteRange", {{"key", EtcdClient::Base64(WantKeyOf(name))}}}});
  }
  call_deadline_ = Clock::now() + BackgroundTimeout();
  json answer;
  status = CallEtcd("/v3/kv/txn", {{"success", ops}}, &answer, true);
  SetHealth(status);
  if (!status.ok()) {
    new_wants_ = std::move(fresh);  // tried again at the next turn
    return;
  }
  my_wants_.insert(fresh.begin(), fresh.end());
  for (const std::string& name : done) my_wants_.erase(name);
}

void EtcdStore::ReleaseIdle(Clock::time_point now) {
  NoteIdle();
  if (lease_ == 0) return;
  // Idle keys another replica waits for, then those idle for release_after.
  std::vector<std::string> names;
  const std::string segments = options_.prefix + "o/p";
  const bool every_segment = wanted_.contains(segments);  // a subtree write of the root
  auto wanted = [&](const std::string& name) {
    return wanted_.contains(name) || (every_segment && name.starts_with(segments));
  };
  auto idle = [](const OwnedKey& owned) { return owned.idle_since != Clock::time_point{}; };
  for (const std::string& name : wanted_) {
    auto it = owned_.find(name);
    if (it != owned_.end() && idle(it->second)) names.push_back(name);
  }
  if (every_segment) {
    for (auto it = owned_.lower_bound(segments);
         it != owned_.end() && it->first.starts_with(segments); ++it) {
      if (idle(it->second) && !wanted_.contains(it->first)) names.push_back(it->first);
    }
  }
  while (!idle_names_.empty() &&
         idle_names_.front().first + options_.ownership.release_after <= now) {
    auto [idle_at, name] = std::move(idle_names_.front());
    idle_names_.pop_front();
    auto it = owned_.find(name);
    // Still idle since that moment, and not among the wanted above.
    if (it != owned_.end() && it->second.idle_since == idle_at && !wanted(name)) {
      names.push_back(std::move(name));
    }
  }
  if (names.empty()) return;
  const std::string lease = std::to_string(lease_);
  for (size_t from = 0; from < names.size(); from += options_.max_batch) {
    const size_t to = std::min(names.size(), from + options_.max_batch);
    json ops = json::array();
    for (size_t i = from; i < to; ++i) {
      const std::string key64 = EtcdClient::Base64(names[i]);
      ops.push_back(
          {{"requestTxn",
            {{"compare", json::array({{{"key", key64},
                                       {"target", "LEASE"},
                                       {"result", "EQUAL"},
                                       {"lease", lease}}})},
             {"success", json::array({{{"requestDeleteRange", {{"key", key64}}}}})}}}});
    }
    call_deadline_ = Clock::now() + BackgroundTimeout();
    json answer;
    const Status status = CallEtcd("/v3/kv/txn", {{"success", ops}}, &answer, true);
    SetHealth(status);
    if (!status.ok()) {
      // Kept, idle: a wanted one goes at the next turn, the others after
      // release_after.
      for (size_t i = from; i < to; ++i) {
        auto it = owned_.find(names[i]);
        if (it == owned_.end()) continue;
        it->second.idle_since = Clock::now();
        idle_names_.emplace_back(it->second.idle_since, names[i]);
      }
      continue;
    }
    for (size_t i = from; i < to; ++i) {
      owned_.erase(names[i]);
      wanted_.erase(names[i]);
      counts_.releases.fetch_add(1, std::memory_order_relaxed);
    }
    counts_.keys_owned.store(owned_.size(), std::memory_order_relaxed);
  }
}

void EtcdStore::Maintain() {
  Clock::time_point now = Clock::now();
  if (lease_ != 0 && now >= next_keepalive_) KeepAlive(Deadline::max());
  if (!new_wants_.empty() || !my_wants_.empty()) PublishWants();
  if (WantsDue()) PollWants();
  ReleaseIdle(Clock::now());
}

void EtcdStore::RevokeLease() {
  if (lease_ == 0) return;
  live_lease_.store(0);
  call_deadline_ = Clock::now() + std::min<Clock::duration>(options_.decision_timeout,
                                                            std::chrono::seconds(2));
  json answer;
  (void)CallEtcd("/v3/lease/revoke", {{"ID", std::to_string(lease_)}}, &answer, true);
  counts_.releases.fetch_add(owned_.size(), std::memory_order_relaxed);
  ForgetLease();
}

void EtcdStore::OwnerNamesOf(const Call& call, std::vector<std::string>* owned,
                             std::vector<std::string>* checked) const {
  if (const auto* single = std::get_if<Single>(&call)) {
    if (Forwarded(single->key)) owned->push_back(OwnerKeyOf(single->key));
  } else if (const auto* several = std::get_if<Several>(&call)) {
    for (const KeyToken& item : several->items) {
      if (Forwarded(item.key)) owned->push_back(OwnerKeyOf(item.key));
    }
  } else if (const auto* t = std::get_if<Tree>(&call); t != nullptr && !t->node) {
    TreeOwners(t->write, owned, checked);
  }
}

bool EtcdStore::MustWait(const Call& call) const {
  if (parked_keys_.empty()) return false;
  std::vector<std::string> owned;
  std::vector<std::string> checked;
  OwnerNamesOf(call, &owned, &checked);
  const std::string segments = options_.prefix + "o/p";
  auto waits = [this, &segments](const std::string& name) {
    if (name == segments) {  // the range of first segments: any of them
      auto it = parked_keys_.lower_bound(segments);
      return it != parked_keys_.end() && it->first.starts_with(segments);
    }
    return parked_keys_.contains(name);
  };
  return std::any_of(owned.begin(), owned.end(), waits) ||
         std::any_of(checked.begin(), checked.end(), waits);
}

void EtcdStore::Park(Call call, const std::string& owner) {
  const Clock::time_point now = Clock::now();
  Deadline& until = std::visit([](auto& c) -> Deadline& { return c.moving_until; }, call);
  const bool first_wait = until == Deadline{};
  if (first_wait) {
    const Deadline deadline = std::visit([](const auto& c) { return c.deadline; }, call);
    until = std::min(now + options_.ownership.wait, deadline);
    counts_.waits.fetch_add(1, std::memory_order_relaxed);
  }
  bool stopping = false;
  {
    std::lock_guard lock(mu_);
    stopping = stopping_;
    if (!stopping && now < until) {
      std::vector<std::string> owned;
      std::vector<std::string> checked;
      OwnerNamesOf(call, &owned, &checked);
      if (first_wait) {
        new_wants_.insert(new_wants_.end(), owned.begin(), owned.end());
        new_wants_.insert(new_wants_.end(), checked.begin(), checked.end());
      }
      for (std::string& name : owned) ++parked_keys_[std::move(name)];
      if (parked_.empty()) next_retry_ = now + kRetryInterval;
      parked_.push_back(std::move(call));
      return;
    }
  }
  Answer(call, stopping ? Status::Unavailable("token store is closed")
                        : Status::Moving("another fencegate replica (" + owner +
                                         ") owns the key and did not give it up within "
                                         "storage.etcd.ownership.wait (" +
                                         std::to_string(options_.ownership.wait.count()) +
                                         " ms)"));
}

void EtcdStore::RetryParked(Clock::time_point now) {
  if (parked_.empty() || (now < next_retry_ && !stopping_)) return;
  queue_.insert(queue_.begin(), std::make_move_iterator(parked_.begin()),
                std::make_move_iterator(parked_.end()));
  parked_.clear();
  parked_keys_.clear();
}

EtcdStore::Clock::time_point EtcdStore::NextWake(Clock::time_point now) const {
  Clock::time_point wake = now + std::chrono::seconds(1);
  if (!parked_.empty()) wake = std::min(wake, next_retry_);
  if (lease_ != 0) wake = std::min(wake, next_keepalive_);
  bool idle = false;
  {
    std::lock_guard lock(idle_mu_);
    idle = !idle_.empty();
  }
  if (idle) wake = std::min(wake, now + kWantPollInterval);
  if (!idle_names_.empty()) {
    wake = std::min(wake, idle_names_.front().first + options_.ownership.release_after);
  }
  if (!owned_.empty()) wake = std::min(wake, next_want_poll_);
  if (!new_wants_.empty()) wake = now;
  if (!my_wants_.empty()) wake = std::min(wake, now + kRetryInterval);
  return wake;
}

}  // namespace fencegate::storage
