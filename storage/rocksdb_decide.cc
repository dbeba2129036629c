// RocksDbStore::Decide: check-and-advance for a batch of requests, in
// order, committed with one DB::Write; and ReadToken, the one way a stored
// token is read. Runs on whoever holds the lane (rocksdb_writer.h).

#include <algorithm>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include <boost/container/small_vector.hpp>

#include "storage/rocksdb_store.h"
#include "storage/rocksdb_support.h"

namespace fencegate::storage {
namespace {

// Decide's batch keeps a buffer up to this size between batches.
constexpr size_t kKeptBatchBytes = 64u << 10;

}  // namespace

using rocksdb_support::DecodeToken;
using rocksdb_support::EncodeToken;
using rocksdb_support::FromRocks;
using rocksdb_support::kTokenBytes;
using rocksdb_support::Printable;
using rocksdb_support::TreeRequest;

Status RocksDbStore::ReadToken(const std::string& key, bool* present,
                               uint64_t* value, bool cache_only, bool on_lane) const {
  rocksdb::PinnableSlice raw;
  rocksdb::Status s;
  rocksdb::ReadOptions ro;
  if (cache_only) ro.read_tier = rocksdb::kBlockCacheTier;
  {
    // A lane holder skips the lock: both I/O threads decide in turn, and a
    // shared lock's count is one more cache line passed between them on
    // every fenced write.
    std::shared_lock<std::shared_mutex> lock(db_mu_, std::defer_lock);
    if (!on_lane) lock.lock();
    if (db_ == nullptr) {
      return Status::IoError("token store is reopening after a write error");
    }
    s = db_->Get(ro, db_->DefaultColumnFamily(), key, &raw);
  }
  if (s.IsIncomplete() && cache_only) return Status::Busy("not cached");
  if (s.IsNotFound()) {
    *present = false;
    return Status::Ok();
  }
  if (!s.ok()) return FromRocks(s, "reading key '" + Printable(key) + "'");
  if (raw.size() != kTokenBytes) {
    return Status::Corruption("stored token for key '" + Printable(key) +
                              "' is " + std::to_string(raw.size()) +
                              " bytes, expected 8");
  }
  *present = true;
  *value = DecodeToken(std::string_view(raw.data(), raw.size()));
  return Status::Ok();
}

Status RocksDbStore::ReadNode(const std::string& path, std::optional<TreeNode>* node,
                              bool cache_only, bool on_lane) const {
  node->reset();
  std::optional<std::string> bytes;
  if (Status s = ReadRecord(TreeKeyOf(path), &bytes, cache_only, on_lane); !s.ok()) return s;
  if (!bytes) return Status::Ok();
  if (!DecodeTreeNode(*bytes, &node->emplace())) {
    node->reset();
    return Status::Corruption("the tree node of '" + Printable(path) + "' does not decode");
  }
  return Status::Ok();
}

Status RocksDbStore::DecideTreeRequest(WriteRequest& r, bool from_caller, KnownTokens& known,
                                       bool remember, NodesSeen& seen,
                                       rocksdb::WriteBatch& changes, Outcome& out) {
  TreeRequest& req = *r.tree;
  const TreeWrite& write = req.write;
  TreeReads reads;
  reads.keys.resize(write.keys.size());
  for (size_t j = 0; j < write.keys.size(); ++j) {
    KnownToken k;
    if (auto it = known.find(write.keys[j]); it != known.end()) {
      k = it->second;
    } else if (Status s = ReadToken(write.keys[j], &k.present, &k.value, from_caller,
                                    /*on_lane=*/true);
               !s.ok()) {
      out.status = s;
      return s;
    }
    if (k.present) reads.keys[j] = k.value;
  }
  const TreePathViews paths = TreeNodePathViews(write);
  // The nodes read from the database, for the call.
  boost::container::small_vector<std::optional<TreeNode>, 16> loaded(paths.size());
  reads.nodes.resize(paths.size());
  auto is_target = [&write](std::string_view p) {
    return std::any_of(write.targets.begin(), write.targets.end(),
                       [p](const TreeTarget& t) { return t.path == p; });
  };
  for (size_t j = 0; j < paths.size(); ++j) {
    if (auto it = seen.find(paths[j]); it != seen.end()) {
      reads.nodes[j] = it->second ? &*it->second : nullptr;
      continue;
    }
    if (auto it = node_cache_.find(paths[j]); it != node_cache_.end()) {
      reads.nodes[j] = &it->second;
      continue;
    }
    if (Status s = ReadNode(std::string(paths[j]), &loaded[j], from_caller, /*on_lane=*/true);
        !s.ok()) {
      out.status = s;
      return s;
    }
    if (!loaded[j]) continue;
    // An ancestor is kept: the next write below it reads it again. A
    // target's own node seldom is (a key's path is written by its holder).
    if (!is_target(paths[j])) {
      reads.nodes[j] = &node_cache_.try_emplace(std::string(paths[j]), *loaded[j]).first->second;
    } else {
      reads.nodes[j] = &*loaded[j];
    }
  }
  TreeChanges decided;
  if (Status s = DecideTree(write, reads, &req.verdict, &decided); !s.ok()) {
    out.status = s;
    return s;
  }
  // Every change or none: a Put that fails takes back those before it.
  changes.SetSavePoint();
  rocksdb::Status put;
  for (const auto& [key, token] : decided.keys) {
    if (put.ok()) put = changes.Put(key, EncodeToken(token));
  }
  for (const auto& [path, node] : decided.nodes) {
    if (!put.ok()) break;
    node_key_.assign(kTreeKeyPrefix);
    node_key_.append(path);
    EncodeTreeNodeInto(node, &node_bytes_);
    put = changes.Put(node_key_, node_bytes_);
  }
  if (!put.ok()) {
    (void)changes.RollbackToSavePoint();
    out.status = FromRocks(put, "building write batch");
    return out.status;
  }
  (void)changes.PopSavePoint();
  if (remember) {
    // The requests after this one in the batch see what it read and changed.
    for (size_t j = 0; j < paths.size(); ++j) {
      if (!seen.contains(paths[j])) {
        seen.try_emplace(std::string(paths[j]),
                         reads.nodes[j] != nullptr ? std::optional<TreeNode>(*reads.nodes[j])
                                                   : std::nullopt);
      }
    }
    for (const auto& [path, node] : decided.nodes) seen.insert_or_assign(path, node);
    for (size_t j = 0; j < write.keys.size(); ++j) {
      known[write.keys[j]] = KnownToken{true, req.verdict.current[j]};
    }
  }
  for (auto& change : decided.nodes) nodes_written_.push_back(std::move(change));
  return Status::Ok();
}

bool RocksDbStore::Decide(std::span<WriteRequest> batch, bool from_caller,
                          std::span<Outcome> outcomes) {
  if (lane_.failed) {  // never from_caller: see WriteLane::TakeForCaller
    Status s = Recover(/*probe=*/false);
    if (!s.ok()) {
      SetHealth(s);
      for (Outcome& o : outcomes) o.status = s;
      batches_.fetch_add(1, std::memory_order_relaxed);
      requests_.fetch_add(batch.size(), std::memory_order_relaxed);
      return true;
    }
  }
  using Known = KnownToken;
  // Value of each key as of the requests decided so far in this batch. The
  // views point into batch, which does not change until the handlers ran.
  // A batch of one never looks a key up twice and needs no map (an
  // AdvanceAll's keys are distinct).
  KnownTokens known;
  const bool remember = batch.size() > 1;
  rocksdb::WriteBatch& changes = *changes_;
  changes.Clear();  // keeps its buffer
  // A key's value as of the requests decided so far: this batch's, then
  // RocksDB's. Busy from_caller: a file to read.
  auto look_up = [&](const std::string& key, Known* k) -> Status {
    if (auto it = known.find(key); it != known.end()) {
      *k = it->second;
    } else {
      return ReadToken(key, &k->present, &k->value, from_caller, /*on_lane=*/true);
    }
    return Status::Ok();
  };

  RecordsSeen records_seen;  // only for a batch that changes a record
  NodesSeen nodes_seen;      // only for a batch of several with a tree write
  nodes_written_.clear();
  if (node_cache_.size() > kNodeCacheEntries) node_cache_.clear();
  for (size_t i = 0; i < batch.size(); ++i) {
    WriteRequest& r = batch[i];
    if (r.tree) {
      Status s = DecideTreeRequest(r, from_caller, known, remember, nodes_seen, changes,
                                   outcomes[i]);
      if (from_caller && s.code() == Status::Code::kBusy) return false;
      continue;
    }
    if (r.record) {
      Status s = DecideRecord(r, from_caller, records_seen, changes, outcomes[i]);
      if (from_caller && s.code() == Status::Code::kBusy) return false;
      continue;
    }
    if (r.batch) {
      // AdvanceAll: decided whole, like one request, or refused whole.
      std::vector<KeyToken>& items = r.batch->items;
      boost::container::small_vector<Known, 4> ks(items.size());
      Status read;
      for (size_t j = 0; j < items.size() && read.ok(); ++j) read = look_up(items[j].key, &ks[j]);
      if (!read.ok()) {
        if (from_caller && read.code() == Status::Code::kBusy) return false;
        outcomes[i].status = std::move(read);
        continue;
      }
      BatchFence& f = outcomes[i].batch;
      f.current.resize(items.size());
      for (size_t j = 0; j < items.size(); ++j) {
        if (ks[j].present && items[j].token < ks[j].value && f.stale == SIZE_MAX) f.stale = j;
      }
      if (f.stale != SIZE_MAX) {
        for (size_t j = 0; j < items.size(); ++j) {
          f.current[j] = ks[j].present ? ks[j].value : 0;
          if (remember) known[items[j].key] = ks[j];
        }
        continue;
      }
      // Every item or none: a Put that fails takes back those before it.
      changes.SetSavePoint();
      Status put;
      for (size_t j = 0; j < items.size() && put.ok(); ++j) {
        f.current[j] = ks[j].present ? std::max(ks[j].value, items[j].token) : items[j].token;
        if (ks[j].present && f.current[j] == ks[j].value) continue;
        if (rocksdb::Status p = changes.Put(items[j].key, EncodeToken(f.current[j])); !p.ok()) {
          put = FromRocks(p, "building write batch");
        }
      }
      if (!put.ok()) {
        (void)changes.RollbackToSavePoint();
        outcomes[i] = Outcome{std::move(put), Fence{}, BatchFence{}};
        continue;
      }
      (void)changes.PopSavePoint();
      if (remember) {
        for (size_t j = 0; j < items.size(); ++j) known[items[j].key] = Known{true, f.current[j]};
      }
      f.accepted = true;
      continue;
    }
    Known k;
    if (Status s = look_up(r.key, &k); !s.ok()) {
      if (from_caller && s.code() == Status::Code::kBusy) {
        return false;  // the read would wait for the disk: nothing decided
      }
      outcomes[i].status = std::move(s);  // e.g. Corruption: never overwrite
      continue;
    }
    if (!r.raise && k.present && r.token < k.value) {
      outcomes[i].fence = Fence{false, k.value};
      if (remember) known[r.key] = k;
      continue;
    }
    uint64_t next = k.present ? std::max(k.value, r.token) : r.token;
    if (!k.present || next != k.value) {
      rocksdb::Status put = changes.Put(r.key, EncodeToken(next));
      if (!put.ok()) {
        outcomes[i].status = FromRocks(put, "building write batch");
        continue;
      }
    }
    if (remember) known[r.key] = Known{true, next};
    outcomes[i].fence = Fence{true, next};
  }

  Status failed;
  if (changes.Count() > 0) failed = free_space_->Check(changes.GetDataSize());
  if (!failed.ok()) {
    write_errors_.fetch_add(1, std::memory_order_relaxed);
    lane_.failed = true;
    SetHealth(failed);
    node_cache_.clear();
  } else if (changes.Count() > 0) {
    rocksdb::WriteOptions wo;
    wo.sync = options_.durability == Durability::kSync;
    // The caller's thread never waits for a write stall (RocksDB answers
    // Incomplete and writes nothing); the writer thread does.
    wo.no_slowdown = from_caller;
    // Under kAsync the WAL record is in the page cache (write(2)) when
    // Write returns: a killed process loses nothing acknowledged.
    rocksdb::Status s = db_->Write(wo, &changes);
    if (from_caller && s.IsIncomplete()) return false;
    db_writes_.fetch_add(1, std::memory_order_relaxed);
    if (s.ok()) {
      // The cached nodes that the batch changed, as written.
      for (auto& [path, node] : nodes_written_) {
        if (auto it = node_cache_.find(path); it != node_cache_.end()) it->second = std::move(node);
      }
      wal_bytes_ += changes.GetDataSize();
      writes_.fetch_add(changes.Count(), std::memory_order_relaxed);
      if (wo.sync) syncs_.fetch_add(1, std::memory_order_relaxed);
      if (lane_.failed) {
        lane_.failed = false;
        SetHealth(Status::Ok());
      }
    } else {
      write_errors_.fetch_add(1, std::memory_order_relaxed);
      free_space_->Forget();  // the disk may be why: ask it before the next write
      db_failed_ = true;
      failed = FromRocks(s, "token store write failed");
      lane_.failed = true;
      node_cache_.clear();
      SetHealth(failed);
    }
  }
  if (!failed.ok()) {
    for (Outcome& o : outcomes) o = Outcome{failed, Fence{}, BatchFence{}};
  }
  // A batch of big keys does not keep its buffer for the writes after it.
  if (changes.GetDataSize() > kKeptBatchBytes) changes_ = std::make_unique<rocksdb::WriteBatch>();
  batches_.fetch_add(1, std::memory_order_relaxed);
  requests_.fetch_add(batch.size(), std::memory_order_relaxed);
  return true;
}

}  // namespace fencegate::storage
