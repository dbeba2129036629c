// EtcdStore's tree of paths (etcd_store.h, tree.h): a run of tree writes
// read in one transaction, decided in order by DecideTree, and written in
// one transaction that compares the modification revision of every key it
// read; read and decided again when another replica changed one meanwhile.

#include <nlohmann/json.hpp>

#include <algorithm>
#include <unordered_map>
#include <utility>

#include "storage/etcd_client.h"
#include "storage/etcd_store.h"

namespace fencegate::storage {

using nlohmann::json;

namespace {

constexpr int kTreeAttempts = 16;

// One etcd key as read: its value (nullopt: absent) and modification
// revision (0 when absent), and the value decided since, if it changed.
struct Read {
  std::optional<std::string> value;
  int64_t mod = 0;
  int64_t lease = 0;  // an owner key's
  std::optional<std::string> decided;
  const std::optional<std::string>& Now() const { return decided ? decided : value; }
};

// The value and revision of a range answer; false when it is not one.
bool ReadOf(const json& answer, Read* out) {
  const json& range = answer.value("response_range", json::object());
  auto kvs = range.find("kvs");
  if (kvs == range.end() || kvs->empty()) return true;
  std::string bytes;
  if (!EtcdClient::FromBase64((*kvs)[0].value("value", std::string()), &bytes)) return false;
  if (!EtcdClient::Int64Field((*kvs)[0], "mod_revision", &out->mod) ||
      !EtcdClient::Int64Field((*kvs)[0], "lease", &out->lease)) {
    return false;
  }
  out->value = std::move(bytes);
  return true;
}

}  // namespace

std::string EtcdStore::NodeKeyOf(std::string_view path) const {
  std::string out = options_.prefix;
  out.append("n/").append(path);
  return out;
}

void EtcdStore::AdvanceTree(TreeWrite write, TreeHandler handler) {
  if (Status s = CheckTreeWrite(write, kMaxKeyBytes); !s.ok()) return handler(s, TreeVerdict{});
  Enqueue(Tree{std::move(write), std::move(handler), {}});
}

void EtcdStore::GetNode(std::string path, NodeHandler handler) {
  Tree call;
  call.write.keys.push_back(std::move(path));
  call.node = std::move(handler);
  Enqueue(std::move(call));
}

void EtcdStore::RunNodeRead(Tree& call) {
  const std::string& path = call.write.keys.front();
  json response;
  Status status = CallEtcd(
      "/v3/kv/range", {{"key", EtcdClient::Base64(NodeKeyOf(path))}}, &response, true);
  SetHealth(status);
  if (!status.ok()) return call.node(status, std::nullopt);
  Read read;
  if (!ReadOf({{"response_range", response}}, &read)) {
    return call.node(EtcdStore::Malformed("a tree node"), std::nullopt);
  }
  if (!read.value) return call.node(Status::Ok(), std::nullopt);
  TreeNode node;
  if (!DecodeTreeNode(*read.value, &node)) {
    return call.node(Status::Corruption("the tree node of '" + path + "' does not decode"),
                     std::nullopt);
  }
  call.node(Status::Ok(), std::move(node));
}

void EtcdStore::RunTrees(std::vector<Tree>& batch, bool again) {
  if (!again) counts_.requests.fetch_add(batch.size(), std::memory_order_relaxed);
  // Every etcd key the batch reads, once, in the order first needed.
  std::vector<std::string> names;
  std::unordered_map<std::string, size_t> index;
  std::vector<std::vector<std::string>> node_paths(batch.size());
  auto need = [&](std::string name) {
    if (index.emplace(name, names.size()).second) names.push_back(std::move(name));
  };
  // Ownership: the owner keys each write owns and checks, read with the
  // rest; a subtree write of the root also reads the range of first
  // segments' owners (`segments`).
  const bool owning = options_.ownership.enabled &&
                      std::any_of(batch.begin(), batch.end(),
                                  [](const Tree& call) { return !call.write.raise; });
  std::vector<std::vector<std::string>> owned(batch.size());
  std::vector<std::vector<std::string>> checked(batch.size());
  const std::string segments = options_.prefix + "o/p";
  const std::string segments_end = options_.prefix + "o/q";
  bool read_segments = false;
  std::vector<std::string> assumed;  // owner keys this replica holds, as far as it knows
  Status status;
  int64_t lease = 0;
  if (owning) {
    lease = EnsureLease(&status);
    if (!status.ok()) {
      for (Tree& call : batch) call.handler(status, TreeVerdict{});
      return;
    }
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    for (const std::string& k : batch[i].write.keys) need(KeyOf(k));
    node_paths[i] = TreeNodePaths(batch[i].write);
    for (const std::string& p : node_paths[i]) need(NodeKeyOf(p));
    if (!owning) continue;
    TreeOwners(batch[i].write, &owned[i], &checked[i]);
    for (const std::string& o : owned[i]) {
      // One this replica took is not read: the write compares its lease.
      if (owned_.contains(o)) {
        assumed.push_back(o);
      } else {
        need(o);
      }
    }
    for (const std::string& c : checked[i]) {
      if (c == segments) {
        read_segments = true;
      } else {
        need(c);
      }
    }
  }
  std::vector<std::string> names64(names.size());
  for (size_t j = 0; j < names.size(); ++j) names64[j] = EtcdClient::Base64(names[j]);
  std::sort(assumed.begin(), assumed.end());
  assumed.erase(std::unique(assumed.begin(), assumed.end()), assumed.end());

  std::vector<std::pair<Status, TreeVerdict>> decided(batch.size());
  // The first write that waits for another replica's key (and every write
  // after it waits too), and that replica's name.
  size_t parked_from = batch.size();
  std::string other;
  size_t taken = 0;  // owner keys the write transaction takes
  const std::string segments64 = EtcdClient::Base64(segments);
  const std::string segments_end64 = EtcdClient::Base64(segments_end);
  for (int attempt = 0; attempt < kTreeAttempts; ++attempt) {
    json reads = json::array();
    for (const std::string& k : names64) reads.push_back({{"requestRange", {{"key", k}}}});
    if (read_segments) {
      reads.push_back({{"requestRange",
                        {{"key", segments64}, {"range_end", segments_end64}, {"keys_only", true}}}});
    }
    // Others' wants, when due, ride along.
    const bool wants = owning && WantsDue();
    if (wants) reads.push_back({{"requestRange", WantsRange()}});
    json read;
    json read_txn = {{"success", reads}};
    if (!assumed.empty()) {
      // The owner keys assumed this replica's are not read but compared
      // (when one is not, nothing is read: the batch is tried again, reading
      // them): a write that changes nothing sends no second transaction, and
      // is forwarded on this check alone.
      json mine = json::array();
      for (const std::string& o : assumed) {
        mine.push_back({{"key", EtcdClient::Base64(o)},
                        {"target", "LEASE"},
                        {"result", "EQUAL"},
                        {"lease", std::to_string(lease)}});
      }
      read_txn["compare"] = std::move(mine);
    }
    status = CallEtcd("/v3/kv/txn", read_txn, &read, true);
    SetHealth(status);
    if (!status.ok()) break;
    if (!assumed.empty() && !EtcdClient::Succeeded(read)) {
      for (const std::string& o : assumed) owned_.erase(o);
      counts_.keys_owned.store(owned_.size(), std::memory_order_relaxed);
      return RunTrees(batch, /*again=*/true);
    }
    const json& answers = read.value("responses", json::array());
    if (answers.size() != names.size() + (read_segments ? 1 : 0) + (wants ? 1 : 0)) {
      status = EtcdStore::Malformed("one answer per key");
      break;
    }
    if (wants) TakeWants(answers.back().value("response_range", json::object()));
    std::vector<Read> state(names.size());
    for (size_t j = 0; j < names.size() && status.ok(); ++j) {
      if (!ReadOf(answers[j], &state[j])) status = EtcdStore::Malformed("a token or a tree node");
    }
    if (!status.ok()) break;
    // Whether every first segment is owned by nobody or this replica, as
    // read; the revision the read saw, for the write's compare.
    bool segments_free = true;
    int64_t read_revision = 0;
    if (read_segments) {
      const json& range = answers[names.size()].value("response_range", json::object());
      for (const json& kv : range.value("kvs", json::array())) {
        int64_t holder = 0;
        if (!EtcdClient::Int64Field(kv, "lease", &holder) || holder != lease) segments_free = false;
      }
      if (!EtcdClient::Int64Field(read.value("header", json::object()), "revision",
                                  &read_revision)) {
        status = EtcdStore::Malformed("a revision");
        break;
      }
    }
    parked_from = batch.size();

    // Each write in order, against what the ones before it decided.
    for (size_t i = 0; i < batch.size(); ++i) {
      const TreeWrite& w = batch[i].write;
      if (owning) {
        auto theirs = [&](const std::string& name) {
          if (name == segments) return !segments_free;
          if (!index.contains(name)) return false;  // assumed: compared below
          const Read& r = state[index.at(name)];
          return r.Now() && r.lease != lease && !r.decided;
        };
        const std::string* first = nullptr;
        for (const auto* names_of : {&owned[i], &checked[i]}) {
          for (const std::string& name : *names_of) {
            if (first == nullptr && theirs(name)) first = &name;
          }
        }
        if (parked_from < i || first != nullptr) {
          // This write waits, and every one after it.
          if (parked_from > i) {
            parked_from = i;
            other = *first == segments ? "one owning a collection below the root"
                                       : state[index.at(*first)].value.value_or("unknown");
          }
          continue;
        }
      }
      TreeReads in;
      std::vector<std::optional<TreeNode>> nodes(node_paths[i].size());
      Status s;
      for (const std::string& k : w.keys) {
        const std::optional<std::string>& v = state[index.at(KeyOf(k))].Now();
        uint64_t token = 0;
        if (v && !DecodeToken(*v, &token)) s = EtcdStore::Malformed("a token");
        in.keys.push_back(v ? std::optional<uint64_t>(token) : std::nullopt);
      }
      for (size_t j = 0; j < node_paths[i].size(); ++j) {
        const std::string& p = node_paths[i][j];
        const std::optional<std::string>& v = state[index.at(NodeKeyOf(p))].Now();
        std::optional<TreeNode>& node = nodes[j];
        if (v && !DecodeTreeNode(*v, &node.emplace())) {
          s = Status::Corruption("the tree node of '" + p + "' does not decode");
        }
        in.nodes.push_back(node ? &*node : nullptr);
      }
      TreeChanges changes;
      if (s.ok()) s = DecideTree(w, in, &decided[i].second, &changes);
      decided[i].first = s;
      if (!s.ok()) continue;
      for (const auto& [key, token] : changes.keys) {
        state[index.at(KeyOf(key))].decided = EncodeToken(token);
      }
      for (const auto& [path, node] : changes.nodes) {
        state[index.at(NodeKeyOf(path))].decided = EncodeTreeNode(node);
      }
      // Its owner keys that nobody held are taken.
      for (const std::string& o : owned[i]) {
        auto at = index.find(o);
        if (at == index.end()) continue;  // assumed
        Read& r = state[at->second];
        if (!r.value && !r.decided) r.decided = "";
      }
    }

    json compares = json::array();
    json puts = json::array();
    taken = 0;
    for (size_t j = 0; j < names.size(); ++j) {
      compares.push_back({{"key", names64[j]},
                          {"target", "MOD"},
                          {"result", "EQUAL"},
                          {"mod_revision", std::to_string(state[j].mod)}});
      if (state[j].decided && state[j].decided->empty() && !state[j].value) {
        // An owner key taken.
        ++taken;
        puts.push_back({{"requestPut",
                         {{"key", names64[j]},
                          {"value", owner_name64_},
                          {"lease", std::to_string(lease)}}}});
      } else if (state[j].decided && state[j].decided != state[j].value) {
        puts.push_back({{"requestPut",
                         {{"key", names64[j]}, {"value", EtcdClient::Base64(*state[j].decided)}}}});
      }
    }
    for (const std::string& o : assumed) {
      compares.push_back({{"key", EtcdClient::Base64(o)},
                          {"target", "LEASE"},
                          {"result", "EQUAL"},
                          {"lease", std::to_string(lease)}});
    }
    if (read_segments) {
      // No first segment taken (nor its owner changed) since the read.
      compares.push_back({{"key", segments64},
                          {"range_end", segments_end64},
                          {"target", "MOD"},
                          {"result", "LESS"},
                          {"mod_revision", std::to_string(read_revision + 1)}});
    }
    if (puts.empty()) {  // nothing accepted changes anything: answered as read
      CountWrite(0, status, 0);
      break;
    }
    json written;
    status = CallEtcd("/v3/kv/txn", {{"compare", compares}, {"success", puts}}, &written,
                              true);
    SetHealth(status);
    const bool succeeded = status.ok() && EtcdClient::Succeeded(written);
    if (owning) NoteFailure(status);
    CountWrite(0, status, succeeded ? puts.size() - taken : 0);  // owner keys are no records
    if (!status.ok() || succeeded) break;
    if (!assumed.empty()) {
      // Perhaps an owner key is no longer this replica's (its lease
      // ended): all of them are read this time.
      for (const std::string& o : assumed) owned_.erase(o);
      counts_.keys_owned.store(owned_.size(), std::memory_order_relaxed);
      return RunTrees(batch, /*again=*/true);
    }
    // Another replica wrote one of them: read and decide again.
    status = Status::Busy("the tree kept changing under a run of tree writes");
  }
  if (status.ok() && owning) {
    counts_.takes.fetch_add(taken, std::memory_order_relaxed);
    for (size_t i = 0; i < parked_from; ++i) {
      if (!decided[i].first.ok()) continue;
      for (const std::string& o : owned[i]) Owned(o, false);
      if (!owned[i].empty()) decided[i].second.owner = lease;
    }
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    if (status.ok() && i >= parked_from) {
      Park(std::move(batch[i]), other);
      continue;
    }
    if (!status.ok()) {
      batch[i].handler(status, TreeVerdict{});
    } else if (!decided[i].first.ok()) {
      batch[i].handler(decided[i].first, TreeVerdict{});
    } else {
      batch[i].handler(Status::Ok(), std::move(decided[i].second));
    }
  }
}

}  // namespace fencegate::storage
