#include "storage/memory_store.h"

#include <algorithm>
#include <optional>
#include <utility>

namespace fencegate::storage {
namespace {

Status Closed() { return Status::Unavailable("token store is closed"); }


}  // namespace

MemoryStore::MemoryStore(MemoryStoreOptions options)
    : answer_on_caller_(options.answer_on_caller) {
  if (!answer_on_caller_) {
    thread_ = std::thread([this] { Loop(); });
    thread_id_ = thread_.get_id();
  }
}

MemoryStore::~MemoryStore() {
  Status s = MemoryStore::Close();  // qualified: no virtual dispatch in a destructor
  (void)s;                          // always ok from here
}

template <class Task>
void MemoryStore::Run(Task task) {
  if (answer_on_caller_) {
    bool closed = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      closed = closing_;
    }
    task(closed);  // decided and answered before the call returns
    return;
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (closing_) {
    lock.unlock();
    task(true);
    return;
  }
  queue_.emplace_back(std::move(task));
  ++queued_;
  lock.unlock();
  work_cv_.notify_one();
}

void MemoryStore::Advance(std::string key, uint64_t token, FenceHandler handler) {
  if (Status s = CheckTokenKey(key, kMaxKeyBytes); !s.ok()) return handler(s, Fence{});
  Run([this, key = std::move(key), token, handler = std::move(handler)](bool closed) mutable {
    if (closed) return handler(Closed(), Fence{});
    DoAdvance(std::move(key), token, handler);
  });
}

void MemoryStore::AdvanceAll(std::vector<KeyToken> items, BatchFenceHandler handler) {
  if (Status s = CheckBatchItems(items, kMaxKeyBytes); !s.ok()) return handler(s, BatchFence{});
  Run([this, items = std::move(items), handler = std::move(handler)](bool closed) {
    if (closed) return handler(Closed(), BatchFence{});
    DoAdvanceAll(items, handler);
  });
}

void MemoryStore::AdvanceTree(TreeWrite write, TreeHandler handler) {
  if (Status s = CheckTreeWrite(write, kMaxKeyBytes); !s.ok()) return handler(s, TreeVerdict{});
  Run([this, write = std::move(write), handler = std::move(handler)](bool closed) {
    if (closed) return handler(Closed(), TreeVerdict{});
    DoAdvanceTree(write, handler);
  });
}

void MemoryStore::GetNode(std::string path, NodeHandler handler) {
  Run([this, path = std::move(path), handler = std::move(handler)](bool closed) {
    if (closed) return handler(Closed(), std::nullopt);
    std::optional<TreeNode> node;
    Status status;
    {
      std::lock_guard<std::mutex> lock(map_mu_);
      if (auto it = nodes_.find(path); it != nodes_.end()) {
        node.emplace();
        if (!DecodeTreeNode(it->second, &*node)) {
          node.reset();
          status = Status::Corruption("the tree node of '" + path + "' does not decode");
        }
      }
    }
    handler(status, std::move(node));
  });
}

void MemoryStore::Raise(std::string key, uint64_t token, FenceHandler handler) {
  if (Status s = CheckTokenKey(key, kMaxKeyBytes); !s.ok()) return handler(s, Fence{});
  Run([this, key = std::move(key), token, handler = std::move(handler)](bool closed) mutable {
    if (closed) return handler(Closed(), Fence{});
    DoRaise(std::move(key), token, handler);
  });
}

void MemoryStore::Get(std::string key, GetHandler handler) {
  if (Status s = CheckTokenKey(key, kMaxKeyBytes); !s.ok()) return handler(s, std::nullopt);
  Run([this, key = std::move(key), handler = std::move(handler)](bool closed) {
    if (closed) return handler(Closed(), std::nullopt);
    DoGet(key, handler);
  });
}

Status MemoryStore::Health() const {
  std::lock_guard<std::mutex> lock(mu_);
  return closing_ ? Closed() : Status::Ok();
}

Status MemoryStore::Close() {
  if (std::this_thread::get_id() == thread_id_) {
    return Status::InvalidArgument(
        "Close() called from a token store handler; call it from another thread");
  }
  std::lock_guard<std::mutex> close_lock(close_mu_);
  if (closed_) return Status::Ok();
  {
    std::lock_guard<std::mutex> lock(mu_);
    closing_ = true;
  }
  work_cv_.notify_all();
  if (thread_.joinable()) thread_.join();  // answers everything queued first
  closed_ = true;
  return Status::Ok();
}

void MemoryStore::Drain() {
  if (answer_on_caller_ || std::this_thread::get_id() == thread_id_) return;
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t target = queued_;
  drained_cv_.wait(lock, [&] { return answered_ >= target; });
}

void MemoryStore::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [this] { return closing_ || !queue_.empty(); });
    if (queue_.empty()) return;  // closing, and every call answered
    std::function<void(bool)> task = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    task(false);
    task = nullptr;  // the handler is gone too before Drain() returns
    lock.lock();
    ++answered_;
    drained_cv_.notify_all();
  }
}

void MemoryStore::DoAdvance(std::string key, uint64_t token, const FenceHandler& handler) {
  Fence f;
  {
    std::lock_guard<std::mutex> lock(map_mu_);
    auto it = map_.find(key);
    if (it == map_.end()) {
      map_.emplace(std::move(key), token);
      f = Fence{true, token};
    } else if (token < it->second) {
      f = Fence{false, it->second};  // refused: nothing stored
    } else {
      it->second = token;
      f = Fence{true, token};
    }
  }
  handler(Status::Ok(), f);
}

void MemoryStore::DoAdvanceAll(const std::vector<KeyToken>& items,
                               const BatchFenceHandler& handler) {
  BatchFence f;
  f.current.resize(items.size());
  {
    std::lock_guard<std::mutex> lock(map_mu_);
    for (size_t i = 0; i < items.size(); ++i) {
      auto it = map_.find(items[i].key);
      f.current[i] = it == map_.end() ? 0 : it->second;
      if (it != map_.end() && items[i].token < it->second && f.stale == SIZE_MAX) f.stale = i;
    }
    f.accepted = f.stale == SIZE_MAX;
    if (f.accepted) {  // every item or none
      for (size_t i = 0; i < items.size(); ++i) {
        auto [it, inserted] = map_.try_emplace(items[i].key, items[i].token);
        if (!inserted) it->second = std::max(it->second, items[i].token);
        f.current[i] = it->second;
      }
    }
  }
  handler(Status::Ok(), std::move(f));
}

void MemoryStore::DoAdvanceTree(const TreeWrite& write, const TreeHandler& handler) {
  TreeVerdict verdict;
  Status status;
  {
    std::lock_guard<std::mutex> lock(map_mu_);
    TreeReads reads;
    const std::vector<std::string> paths = TreeNodePaths(write);
    std::vector<std::optional<TreeNode>> nodes(paths.size());
    for (const std::string& key : write.keys) {
      auto it = map_.find(key);
      reads.keys.push_back(it == map_.end() ? std::nullopt : std::optional<uint64_t>(it->second));
    }
    for (size_t j = 0; j < paths.size() && status.ok(); ++j) {
      auto it = nodes_.find(paths[j]);
      std::optional<TreeNode>& node = nodes[j];
      if (it != nodes_.end() && !DecodeTreeNode(it->second, &node.emplace())) {
        status = Status::Corruption("the tree node of '" + paths[j] + "' does not decode");
      }
      reads.nodes.push_back(node ? &*node : nullptr);
    }
    TreeChanges changes;
    if (status.ok()) status = DecideTree(write, reads, &verdict, &changes);
    if (status.ok()) {
      for (auto& [key, token] : changes.keys) map_[key] = token;
      for (auto& [path, node] : changes.nodes) nodes_[path] = EncodeTreeNode(node);
    }
  }
  handler(status, status.ok() ? std::move(verdict) : TreeVerdict{});
}

void MemoryStore::DoRaise(std::string key, uint64_t token, const FenceHandler& handler) {
  Fence f{true, token};
  {
    std::lock_guard<std::mutex> lock(map_mu_);
    auto it = map_.find(key);
    if (it == map_.end()) {
      map_.emplace(std::move(key), token);
    } else {
      it->second = std::max(it->second, token);
      f.current = it->second;
    }
  }
  handler(Status::Ok(), f);
}

void MemoryStore::DoGet(const std::string& key, const GetHandler& handler) {
  std::optional<uint64_t> value;
  {
    std::lock_guard<std::mutex> lock(map_mu_);
    if (auto it = map_.find(key); it != map_.end()) value = it->second;
  }
  handler(Status::Ok(), value);
}

std::optional<std::string> MemoryStore::StoredRecord(const std::string& key) {
  auto it = records_.find(key);
  if (it == records_.end()) return std::nullopt;
  return it->second;
}

void MemoryStore::Apply(const std::string& key, RecordDecision& change) {
  if (!change.apply) return;
  if (change.put) {
    records_[key] = std::move(*change.put);
  } else {
    records_.erase(key);
  }
}

void MemoryStore::ReserveKey(std::string key, IdempotencyRecord reservation,
                             ReserveHandler handler) {
  Status s = CheckRecordKey(key);
  if (s.ok()) s = CheckRecordFor(reservation, IdempotencyRecord::State::kReserved);
  if (!s.ok()) return handler(s, Reservation{});
  Run([this, key = std::move(key), reservation = std::move(reservation),
       handler = std::move(handler)](bool closed) {
    if (closed) return handler(Closed(), Reservation{});
    Reservation answer;
    RecordDecision change;
    Status st;
    {
      std::lock_guard<std::mutex> lock(map_mu_);
      st = DecideReserve(StoredRecord(key), reservation, &answer, &change);
      if (st.ok()) Apply(key, change);
    }
    handler(st, std::move(answer));
  });
}

void MemoryStore::FinishKey(std::string key, IdempotencyRecord finished, int64_t now_ms,
                            ChangeHandler handler) {
  Status s = CheckRecordKey(key);
  if (s.ok()) s = CheckRecordFor(finished, IdempotencyRecord::State::kFinished);
  if (!s.ok()) return handler(s, false);
  Run([this, key = std::move(key), finished = std::move(finished), now_ms,
       handler = std::move(handler)](bool closed) {
    if (closed) return handler(Closed(), false);
    RecordDecision change;
    Status st;
    {
      std::lock_guard<std::mutex> lock(map_mu_);
      st = DecideFinish(StoredRecord(key), finished, now_ms, &change);
      if (st.ok()) Apply(key, change);
    }
    handler(st, st.ok() && change.apply);
  });
}

void MemoryStore::ReleaseKey(std::string key, uint64_t owner, ChangeHandler handler) {
  Status s = CheckRecordKey(key);
  if (!s.ok()) return handler(s, false);
  Run([this, key = std::move(key), owner, handler = std::move(handler)](bool closed) {
    if (closed) return handler(Closed(), false);
    RecordDecision change;
    Status st;
    {
      std::lock_guard<std::mutex> lock(map_mu_);
      st = DecideRelease(StoredRecord(key), owner, &change);
      if (st.ok()) Apply(key, change);
    }
    handler(st, st.ok() && change.apply);
  });
}

void MemoryStore::RenewKey(std::string key, uint64_t owner, int64_t expires_ms,
                           int64_t /*now_ms*/, ChangeHandler handler) {
  Status s = CheckRecordKey(key);
  if (!s.ok()) return handler(s, false);
  Run([this, key = std::move(key), owner, expires_ms, handler = std::move(handler)](bool closed) {
    if (closed) return handler(Closed(), false);
    RecordDecision change;
    Status st;
    {
      std::lock_guard<std::mutex> lock(map_mu_);
      st = DecideRenew(StoredRecord(key), owner, expires_ms, &change);
      if (st.ok()) Apply(key, change);
    }
    handler(st, st.ok() && change.apply);
  });
}

void MemoryStore::LookupKey(std::string key, int64_t now_ms, LookupHandler handler) {
  Status s = CheckRecordKey(key);
  if (!s.ok()) return handler(s, std::nullopt);
  Run([this, key = std::move(key), now_ms, handler = std::move(handler)](bool closed) {
    if (closed) return handler(Closed(), std::nullopt);
    std::optional<IdempotencyRecord> answer;
    Status st;
    {
      std::lock_guard<std::mutex> lock(map_mu_);
      st = DecideLookup(StoredRecord(key), now_ms, &answer);
    }
    handler(st, std::move(answer));
  });
}

size_t MemoryStore::SweepRecords(int64_t now_ms) {
  std::lock_guard<std::mutex> lock(map_mu_);
  size_t removed = 0;
  for (auto it = records_.begin(); it != records_.end();) {
    std::optional<IdempotencyRecord> live;
    if (DecideLookup(it->second, now_ms, &live).ok() && !live) {
      it = records_.erase(it);
      ++removed;
    } else {
      ++it;
    }
  }
  return removed;
}

size_t MemoryStore::RecordCount() {
  std::lock_guard<std::mutex> lock(map_mu_);
  return records_.size();
}

}  // namespace fencegate::storage
