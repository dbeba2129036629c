#include "tests/storage/power_loss_fs.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <system_error>
#include <utility>
#include <vector>

#include <rocksdb/system_clock.h>

namespace fencegate::storage::testing {

using rocksdb::FileOptions;
using rocksdb::FSDirectory;
using rocksdb::FSWritableFile;
using rocksdb::IODebugContext;
using rocksdb::IOOptions;
using rocksdb::IOStatus;
using rocksdb::Slice;

namespace {

constexpr uint64_t kPageBytes = 4096;

// One spelling per file, so that "dir//a" and "dir/a" share their state.
std::string Normal(const std::string& name) {
  std::string out = std::filesystem::path(name).lexically_normal().string();
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

std::string DirOf(const std::string& normal_name) {
  return std::filesystem::path(normal_name).parent_path().string();
}

IOStatus FromErrorCode(const std::error_code& ec, const std::string& what) {
  return IOStatus::IOError(what + ": " + ec.message());
}

// The whole content of a file, or nullopt when it cannot be read.
std::optional<std::string> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

struct PowerLossFs::FileState {
  uint64_t appended = 0;       // bytes written through the file system
  uint64_t synced = 0;         // bytes that the last successful Sync/Fsync covered
  bool entry_durable = false;  // the directory entry survives a loss
  uint64_t entry_seq = 0;      // when the entry appeared (creation or rename)
  // The durable file that an unsynced rename replaced: comes back at a loss.
  std::optional<std::string> replaced;
};

// A file opened for writing: forwards everything and tracks appends and
// syncs in its FileState (shared with the map, so a rename keeps it).
class PowerLossFile : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  PowerLossFile(PowerLossFs* fs, std::shared_ptr<PowerLossFs::FileState> state,
                std::unique_ptr<FSWritableFile> file)
      : FSWritableFileOwnerWrapper(std::move(file)), fs_(fs), state_(std::move(state)) {
    fs_->open_files_.fetch_add(1);
  }
  ~PowerLossFile() override { Closed(); }

  IOStatus Append(const Slice& data, const IOOptions& o, IODebugContext* d) override {
    if (IOStatus s = fs_->BeginOp(); !s.ok()) return s;
    IOStatus s = FSWritableFileOwnerWrapper::Append(data, o, d);
    if (s.ok()) Appended(data.size());
    return s;
  }
  IOStatus Append(const Slice& data, const IOOptions& o, const rocksdb::DataVerificationInfo& v,
                  IODebugContext* d) override {
    if (IOStatus s = fs_->BeginOp(); !s.ok()) return s;
    IOStatus s = FSWritableFileOwnerWrapper::Append(data, o, v, d);
    if (s.ok()) Appended(data.size());
    return s;
  }
  IOStatus PositionedAppend(const Slice& data, uint64_t offset, const IOOptions& o,
                            IODebugContext* d) override {
    if (IOStatus s = fs_->BeginOp(); !s.ok()) return s;
    IOStatus s = FSWritableFileOwnerWrapper::PositionedAppend(data, offset, o, d);
    if (s.ok()) AppendedAt(offset + data.size());
    return s;
  }
  IOStatus PositionedAppend(const Slice& data, uint64_t offset, const IOOptions& o,
                            const rocksdb::DataVerificationInfo& v, IODebugContext* d) override {
    if (IOStatus s = fs_->BeginOp(); !s.ok()) return s;
    IOStatus s = FSWritableFileOwnerWrapper::PositionedAppend(data, offset, o, v, d);
    if (s.ok()) AppendedAt(offset + data.size());
    return s;
  }
  IOStatus Truncate(uint64_t size, const IOOptions& o, IODebugContext* d) override {
    if (IOStatus s = fs_->BeginOp(); !s.ok()) return s;
    IOStatus s = FSWritableFileOwnerWrapper::Truncate(size, o, d);
    if (s.ok()) {
      std::lock_guard<std::mutex> lock(fs_->mu_);
      state_->appended = size;
      state_->synced = std::min(state_->synced, size);
    }
    return s;
  }
  // Not intercepted: Flush hands a file's user-space buffer to the OS, and
  // the Posix file system has none (its Flush does nothing), so it cannot
  // fail when the disk does. Failing it would break RocksDB's WAL writer in
  // a way a real disk cannot (its next sync then aborts on an assertion in
  // Debian's librocksdb 7.8). Nothing becomes durable either way.
  // Starts write-back of a range without waiting for it: nothing becomes
  // durable (sync_file_range does not flush the disk cache or metadata).
  IOStatus RangeSync(uint64_t offset, uint64_t nbytes, const IOOptions& o,
                     IODebugContext* d) override {
    if (IOStatus s = fs_->BeginOp(); !s.ok()) return s;
    return FSWritableFileOwnerWrapper::RangeSync(offset, nbytes, o, d);
  }
  // Closing makes nothing durable (close(2) does not sync).
  IOStatus Close(const IOOptions& o, IODebugContext* d) override {
    Closed();
    return FSWritableFileOwnerWrapper::Close(o, d);
  }
  IOStatus Sync(const IOOptions& o, IODebugContext* d) override {
    return Synced([&] { return FSWritableFileOwnerWrapper::Sync(o, d); });
  }
  IOStatus Fsync(const IOOptions& o, IODebugContext* d) override {
    return Synced([&] { return FSWritableFileOwnerWrapper::Fsync(o, d); });
  }

 private:
  void Appended(uint64_t bytes) {
    std::lock_guard<std::mutex> lock(fs_->mu_);
    state_->appended += bytes;
  }
  void AppendedAt(uint64_t end) {
    std::lock_guard<std::mutex> lock(fs_->mu_);
    state_->appended = std::max(state_->appended, end);
  }
  // Bytes appended before the sync started are durable once it succeeds;
  // ones appended meanwhile (from another thread) may not be. A sync the
  // power loss interrupted never returned: it fails and covers nothing.
  template <typename SyncFn>
  IOStatus Synced(SyncFn sync) {
    if (IOStatus s = fs_->BeginOp(); !s.ok()) return s;
    uint64_t covered = 0;
    {
      std::lock_guard<std::mutex> lock(fs_->mu_);
      covered = state_->appended;
    }
    IOStatus s = sync();
    if (s.ok()) s = fs_->CheckPowered();
    if (s.ok()) {
      std::lock_guard<std::mutex> lock(fs_->mu_);
      state_->synced = std::max(state_->synced, covered);
    }
    return s;
  }

  void Closed() {
    if (!closed_.exchange(true)) fs_->open_files_.fetch_sub(1);
  }

  PowerLossFs* fs_;
  std::shared_ptr<PowerLossFs::FileState> state_;
  std::atomic<bool> closed_{false};
};

// A directory handle: a successful fsync makes the entries created in the
// directory before it durable.
class PowerLossDir : public rocksdb::FSDirectoryWrapper {
 public:
  PowerLossDir(PowerLossFs* fs, std::string dir, std::unique_ptr<FSDirectory> target)
      : FSDirectoryWrapper(std::move(target)), fs_(fs), dir_(std::move(dir)) {}

  IOStatus Fsync(const IOOptions& o, IODebugContext* d) override {
    return Synced([&] { return FSDirectoryWrapper::Fsync(o, d); });
  }
  // RocksDB 7.8 syncs a directory this way after a new file's first sync
  // and after renaming CURRENT; the default implementation would bypass
  // Fsync above.
  IOStatus FsyncWithDirOptions(const IOOptions& o, IODebugContext* d,
                               const rocksdb::DirFsyncOptions& options) override {
    return Synced([&] { return FSDirectoryWrapper::FsyncWithDirOptions(o, d, options); });
  }

 private:
  template <typename SyncFn>
  IOStatus Synced(SyncFn sync) {
    if (IOStatus s = fs_->BeginOp(); !s.ok()) return s;
    const uint64_t seq = fs_->NextSeq();
    IOStatus s = sync();
    if (s.ok()) s = fs_->CheckPowered();  // interrupted by the loss: never returned
    if (s.ok()) fs_->DirSynced(dir_, seq);
    return s;
  }

  PowerLossFs* fs_;
  const std::string dir_;
};

PowerLossFs::PowerLossFs(std::shared_ptr<rocksdb::FileSystem> base)
    : FileSystemWrapper(std::move(base)) {}

PowerLossFs::~PowerLossFs() = default;

void PowerLossFs::Deactivate() {
  {
    std::lock_guard<std::mutex> lock(power_mu_);
    powered_ = false;
    countdown_ = 0;
  }
  power_cv_.notify_all();
}

void PowerLossFs::DeactivateAfter(uint64_t ops) { countdown_ = static_cast<int64_t>(ops) + 1; }

bool PowerLossFs::WaitDeactivated(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(power_mu_);
  return power_cv_.wait_for(lock, timeout, [this] { return !powered_.load(); });
}

void PowerLossFs::Reactivate() {
  std::lock_guard<std::mutex> lock(power_mu_);
  countdown_ = 0;
  powered_ = true;
}

IOStatus PowerLossFs::BeginOp() {
  if (countdown_.load() > 0 && countdown_.fetch_sub(1) == 1) Deactivate();
  return CheckPowered();
}

IOStatus PowerLossFs::CheckPowered() const {
  if (powered_.load()) return IOStatus::OK();
  return IOStatus::IOError("simulated power loss: the disk is gone");
}

uint64_t PowerLossFs::NextSeq() {
  std::lock_guard<std::mutex> lock(mu_);
  return ++seq_;
}

void PowerLossFs::DirSynced(const std::string& dir, uint64_t seq) {
  dir_syncs_.fetch_add(1);
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [path, state] : files_) {
    if (!state->entry_durable && state->entry_seq < seq && DirOf(path) == dir) {
      state->entry_durable = true;
      state->replaced.reset();
    }
  }
}

std::optional<PowerLossFs::FileView> PowerLossFs::View(const std::string& path) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = files_.find(Normal(path));
  if (it == files_.end()) return std::nullopt;
  return FileView{it->second->appended, it->second->synced, it->second->entry_durable};
}

std::unique_ptr<FSWritableFile> PowerLossFs::Track(const std::string& name,
                                                   std::unique_ptr<FSWritableFile> file,
                                                   bool existed, uint64_t size) {
  const std::string path = Normal(name);
  auto state = std::make_shared<FileState>();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = files_.find(path);
  if (it != files_.end()) {
    // Written (and perhaps renamed here) since the last loss: the entry
    // keeps its durability; the content starts over from `size`.
    state->entry_durable = it->second->entry_durable;
    state->entry_seq = it->second->entry_seq;
    state->replaced = it->second->replaced;
    state->synced = std::min(it->second->synced, size);
  } else {
    // Not written since the last loss: one that existed is on the disk,
    // entry and bytes; a new one has neither yet.
    state->entry_durable = existed;
    state->entry_seq = ++seq_;
    state->synced = existed ? size : 0;
  }
  state->appended = size;
  files_[path] = state;
  return std::make_unique<PowerLossFile>(this, std::move(state), std::move(file));
}

IOStatus PowerLossFs::NewWritableFile(const std::string& name, const FileOptions& options,
                                      std::unique_ptr<FSWritableFile>* result,
                                      IODebugContext* dbg) {
  if (IOStatus s = BeginOp(); !s.ok()) return s;
  const bool existed = target()->FileExists(name, IOOptions(), dbg).ok();
  std::unique_ptr<FSWritableFile> file;
  IOStatus s = target()->NewWritableFile(name, options, &file, dbg);
  if (!s.ok()) return s;
  // Opened with O_TRUNC: nothing of it is synced.
  *result = Track(name, std::move(file), existed, 0);
  return s;
}

IOStatus PowerLossFs::ReopenWritableFile(const std::string& name, const FileOptions& options,
                                         std::unique_ptr<FSWritableFile>* result,
                                         IODebugContext* dbg) {
  if (IOStatus s = BeginOp(); !s.ok()) return s;
  const bool existed = target()->FileExists(name, IOOptions(), dbg).ok();
  std::unique_ptr<FSWritableFile> file;
  IOStatus s = target()->ReopenWritableFile(name, options, &file, dbg);
  if (!s.ok()) return s;
  uint64_t size = 0;
  if (existed) {
    s = target()->GetFileSize(name, IOOptions(), &size, dbg);
    if (!s.ok()) return s;
  }
  *result = Track(name, std::move(file), existed, size);
  return s;
}

IOStatus PowerLossFs::ReuseWritableFile(const std::string&, const std::string&, const FileOptions&,
                                        std::unique_ptr<FSWritableFile>*, IODebugContext*) {
  return IOStatus::NotSupported("PowerLossFs does not track reused files");
}

IOStatus PowerLossFs::NewRandomRWFile(const std::string&, const FileOptions&,
                                      std::unique_ptr<rocksdb::FSRandomRWFile>*, IODebugContext*) {
  return IOStatus::NotSupported("PowerLossFs does not track random-access writes");
}

IOStatus PowerLossFs::NewDirectory(const std::string& name, const IOOptions& options,
                                   std::unique_ptr<FSDirectory>* result, IODebugContext* dbg) {
  std::unique_ptr<FSDirectory> dir;
  IOStatus s = target()->NewDirectory(name, options, &dir, dbg);
  if (s.ok()) *result = std::make_unique<PowerLossDir>(this, Normal(name), std::move(dir));
  return s;
}

IOStatus PowerLossFs::RenameFile(const std::string& src, const std::string& target_name,
                                 const IOOptions& options, IODebugContext* dbg) {
  if (IOStatus s = BeginOp(); !s.ok()) return s;
  const std::string from = Normal(src);
  const std::string to = Normal(target_name);
  // What a loss before the next directory sync brings back under `to`:
  // the file there now, as far as it is durable.
  std::optional<std::string> replaced;
  bool tracked = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = files_.find(to); it != files_.end()) {
      tracked = true;
      if (!it->second->entry_durable) {
        replaced = it->second->replaced;  // itself unsynced: what it replaced comes back
      } else if (auto content = ReadAll(to)) {
        replaced = content->substr(0, it->second->synced);
      }
    }
  }
  if (!tracked && target()->FileExists(target_name, IOOptions(), dbg).ok()) {
    replaced = ReadAll(to);  // untracked: wholly durable
  }
  uint64_t src_size = 0;
  IOStatus s = target()->GetFileSize(src, IOOptions(), &src_size, dbg);
  if (!s.ok()) return s;
  s = target()->RenameFile(src, target_name, options, dbg);
  if (!s.ok()) return s;
  std::lock_guard<std::mutex> lock(mu_);
  std::shared_ptr<FileState> state;
  if (auto it = files_.find(from); it != files_.end()) {
    state = it->second;
    files_.erase(it);
  } else {
    state = std::make_shared<FileState>();  // untracked: its bytes are durable
    state->appended = state->synced = src_size;
  }
  state->entry_durable = false;
  state->entry_seq = ++seq_;
  state->replaced = std::move(replaced);
  files_[to] = std::move(state);
  return s;
}

IOStatus PowerLossFs::LinkFile(const std::string&, const std::string&, const IOOptions&,
                               IODebugContext*) {
  return IOStatus::NotSupported("PowerLossFs does not track hard links");
}

IOStatus PowerLossFs::DeleteFile(const std::string& name, const IOOptions& options,
                                 IODebugContext* dbg) {
  if (IOStatus s = BeginOp(); !s.ok()) return s;
  IOStatus s = target()->DeleteFile(name, options, dbg);
  if (s.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    files_.erase(Normal(name));
  }
  return s;
}

IOStatus PowerLossFs::Truncate(const std::string& name, size_t size, const IOOptions& options,
                               IODebugContext* dbg) {
  if (IOStatus s = BeginOp(); !s.ok()) return s;
  IOStatus s = target()->Truncate(name, size, options, dbg);
  if (s.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = files_.find(Normal(name)); it != files_.end()) {
      it->second->appended = size;
      it->second->synced = std::min<uint64_t>(it->second->synced, size);
    }
  }
  return s;
}

IOStatus PowerLossFs::CreateDir(const std::string& name, const IOOptions& options,
                                IODebugContext* dbg) {
  if (IOStatus s = BeginOp(); !s.ok()) return s;
  return target()->CreateDir(name, options, dbg);
}

IOStatus PowerLossFs::CreateDirIfMissing(const std::string& name, const IOOptions& options,
                                         IODebugContext* dbg) {
  if (IOStatus s = BeginOp(); !s.ok()) return s;
  return target()->CreateDirIfMissing(name, options, dbg);
}

IOStatus PowerLossFs::LosePower(LossMode mode, std::mt19937_64& rng, LossReport* report) {
  if (powered_.load()) return IOStatus::IOError("LosePower needs Deactivate() first");
  if (const int open = open_files_.load(); open > 0) {
    return IOStatus::IOError(std::to_string(open) + " files still open: close the store first");
  }
  namespace fs = std::filesystem;
  std::lock_guard<std::mutex> lock(mu_);
  LossReport r;
  for (auto& [path, state] : files_) {
    std::error_code ec;
    if (!state->entry_durable) {
      r.bytes_lost += state->appended;
      if (fs::remove(path, ec)) ++r.files_removed;
      if (ec) return FromErrorCode(ec, "removing " + path);
      if (state->replaced) {
        std::ofstream out(path, std::ios::binary | std::ios::trunc);
        out.write(state->replaced->data(), static_cast<std::streamsize>(state->replaced->size()));
        if (!out) return IOStatus::IOError("restoring " + path);
        ++r.files_restored;
      }
      continue;
    }
    const uint64_t on_disk = fs::file_size(path, ec);
    if (ec) return FromErrorCode(ec, "sizing " + path);
    const uint64_t written = std::min(state->appended, on_disk);
    if (written <= state->synced) continue;
    uint64_t keep = state->synced;  // kDropUnsynced
    uint64_t zeros_to = 0;          // kTearLastPage: zeros from keep up to here
    if (mode == LossMode::kKeepRandomPrefix) {
      keep = std::uniform_int_distribution<uint64_t>(state->synced, written)(rng);
    } else if (mode == LossMode::kTearLastPage) {
      keep = std::uniform_int_distribution<uint64_t>(state->synced, written - 1)(rng);
      zeros_to = std::min(written, (keep / kPageBytes + 1) * kPageBytes);
    }
    if (keep == on_disk) continue;
    fs::resize_file(path, keep, ec);
    if (ec) return FromErrorCode(ec, "cutting " + path);
    if (zeros_to > keep) {
      fs::resize_file(path, zeros_to, ec);  // extends with zeros
      if (ec) return FromErrorCode(ec, "tearing " + path);
      r.bytes_zeroed += zeros_to - keep;
      r.torn.push_back(LossReport::Torn{path, keep});
    }
    r.bytes_lost += on_disk - keep;
    ++r.files_cut;
  }
  // What is on the disk now is all there is: it all counts as durable.
  files_.clear();
  if (report != nullptr) *report = r;
  return IOStatus::OK();
}

namespace {

class ShortBackoffClock : public rocksdb::SystemClockWrapper {
 public:
  explicit ShortBackoffClock(const std::shared_ptr<rocksdb::SystemClock>& target)
      : SystemClockWrapper(target) {}
  const char* Name() const override { return "ShortBackoffClock"; }
  void SleepForMicroseconds(int micros) override {
    SystemClockWrapper::SleepForMicroseconds(std::min(micros, kLongestSleepMicros));
  }

 private:
  static constexpr int kLongestSleepMicros = 1000;
};

// The composite Env of fs, with the clock above: system_clock_ is the
// member that RocksDB takes its clock from (Env::GetSystemClock).
class PowerLossEnv : public rocksdb::EnvWrapper {
 public:
  explicit PowerLossEnv(const std::shared_ptr<PowerLossFs>& fs)
      : EnvWrapper(rocksdb::NewCompositeEnv(fs)) {
    system_clock_ = std::make_shared<ShortBackoffClock>(system_clock_);
  }
  const char* Name() const override { return "PowerLossEnv"; }
};

}  // namespace

std::unique_ptr<rocksdb::Env> NewPowerLossEnv(const std::shared_ptr<PowerLossFs>& fs) {
  return std::make_unique<PowerLossEnv>(fs);
}

}  // namespace fencegate::storage::testing
