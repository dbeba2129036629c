#pragma once
// PowerLossFs: a RocksDB file system for tests that remembers what reached
// the disk for sure and, at a simulated power loss, takes away the rest (in
// the spirit of RocksDB's FaultInjectionTestFS and Jepsen's LazyFS).
//
// Per file written through it, it tracks the bytes appended and the bytes
// that the last Sync/Fsync covered (Flush and RangeSync make nothing
// durable), and whether its directory entry is durable: a file created, or
// renamed into place, is not until its directory is fsynced (FSDirectory
// Fsync or FsyncWithDirOptions). Files it has not seen written (there
// before it, or before the last LosePower) count as wholly durable.
//
// A power loss, in three steps:
//   1. Deactivate(): every later write, sync, create, rename or delete
//      fails with IOError, so the store's writes in flight fail and are
//      never acknowledged.
//   2. The test closes the store (whatever Close reports) so that no file
//      is open.
//   3. LosePower(mode): changes the real files as the disk would show them
//      after the loss; then Reactivate(), and the store may open again.
//
// Not modelled: a deleted file never comes back, a file renamed away from a
// durable name does not reappear under it, directories themselves (the
// test's data dir exists before the store opens) are always durable.
// Thread-safe: RocksDB calls it from its foreground and background threads.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/io_status.h>

namespace fencegate::storage::testing {

// What a power loss does to the bytes that were written but not synced.
enum class LossMode {
  kDropUnsynced,      // every unsynced byte is gone
  kKeepRandomPrefix,  // a random prefix of them survived
  // A random prefix survived and the rest of its 4 KiB page (up to the
  // bytes written) reads as zeros: the file's size reached the disk, the
  // page's data did not.
  kTearLastPage,
};

// What LosePower changed, for the test's counts and failure messages.
struct LossReport {
  int files_cut = 0;          // files that lost bytes (or got zeros)
  int files_removed = 0;      // entries that vanished: dir never synced
  int files_restored = 0;     // older files that an unsynced rename had replaced
  uint64_t bytes_lost = 0;    // unsynced bytes no longer there
  uint64_t bytes_zeroed = 0;  // bytes that read as zeros (kTearLastPage)
  // kTearLastPage: each file that got zeros, and where they start.
  struct Torn {
    std::string path;
    uint64_t zeros_from = 0;
  };
  std::vector<Torn> torn;
};

class PowerLossFs : public rocksdb::FileSystemWrapper {
 public:
  explicit PowerLossFs(std::shared_ptr<rocksdb::FileSystem> base = rocksdb::FileSystem::Default());
  ~PowerLossFs() override;

  const char* Name() const override { return "PowerLossFs"; }

  // Stops the disk: from now on appends, syncs, file creation, renames,
  // deletes and directory syncs fail with IOError (reads, closes and
  // Flush, which only hands buffers to the OS, still work). A write already
  // under way completes, unsynced; a sync (of a file or a directory) under
  // way fails and makes nothing durable, as a sync that the loss cut short
  // never returns.
  void Deactivate();

  // Applies the loss to the real files: with every file closed and the file
  // system deactivated, deletes the files whose entries are not durable
  // (restoring the durable file an unsynced rename replaced), then cuts
  // every other tracked file to its synced bytes plus what `mode` keeps,
  // drawn from rng, and forgets all tracking: what is on the disk then is
  // all there is, and durable. Fills *report (may be null). IOError if the
  // file system is still active, a file written through it is still open,
  // or a file cannot be changed.
  rocksdb::IOStatus LosePower(LossMode mode, std::mt19937_64& rng, LossReport* report);

  // Deactivates the file system as the ops-th write, sync, file creation,
  // rename or delete from now on begins (0: the very next), so that the
  // loss falls between two steps of the store's I/O, such as a WAL append
  // and its sync; that operation and every later one fail.
  void DeactivateAfter(uint64_t ops);

  // Waits at most `timeout` for the file system to be deactivated (by
  // Deactivate or DeactivateAfter); true if it is.
  bool WaitDeactivated(std::chrono::milliseconds timeout);

  // Powers on again: writes go through. Without a LosePower in between it
  // is an outage that lost nothing: the tracking goes on.
  void Reactivate();

  // How many bytes of `path` are appended / synced / whether its directory
  // entry is durable; nullopt when the file is not tracked. For tests.
  struct FileView {
    uint64_t appended = 0;
    uint64_t synced = 0;
    bool entry_durable = false;
  };
  std::optional<FileView> View(const std::string& path) const;

  // Directory syncs seen (FSDirectory Fsync or FsyncWithDirOptions) that
  // succeeded. For tests.
  uint64_t dir_syncs() const { return dir_syncs_.load(); }

  rocksdb::IOStatus NewWritableFile(const std::string& name, const rocksdb::FileOptions& options,
                                    std::unique_ptr<rocksdb::FSWritableFile>* result,
                                    rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus ReopenWritableFile(const std::string& name, const rocksdb::FileOptions& options,
                                       std::unique_ptr<rocksdb::FSWritableFile>* result,
                                       rocksdb::IODebugContext* dbg) override;
  // Not supported (RocksDB asks for it only when recycling WAL files, which
  // fencegate does not): an untracked write would survive any loss.
  rocksdb::IOStatus ReuseWritableFile(const std::string& name, const std::string& old_name,
                                      const rocksdb::FileOptions& options,
                                      std::unique_ptr<rocksdb::FSWritableFile>* result,
                                      rocksdb::IODebugContext* dbg) override;
  // Not supported, for the same reason (RocksDB's ingestion paths only).
  rocksdb::IOStatus NewRandomRWFile(const std::string& name, const rocksdb::FileOptions& options,
                                    std::unique_ptr<rocksdb::FSRandomRWFile>* result,
                                    rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus NewDirectory(const std::string& name, const rocksdb::IOOptions& options,
                                 std::unique_ptr<rocksdb::FSDirectory>* result,
                                 rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus RenameFile(const std::string& src, const std::string& target,
                               const rocksdb::IOOptions& options,
                               rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus LinkFile(const std::string& src, const std::string& target,
                             const rocksdb::IOOptions& options,
                             rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus DeleteFile(const std::string& name, const rocksdb::IOOptions& options,
                               rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus Truncate(const std::string& name, size_t size,
                             const rocksdb::IOOptions& options,
                             rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus CreateDir(const std::string& name, const rocksdb::IOOptions& options,
                              rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus CreateDirIfMissing(const std::string& name, const rocksdb::IOOptions& options,
                                       rocksdb::IODebugContext* dbg) override;

 private:
  friend class PowerLossFile;
  friend class PowerLossDir;
  struct FileState;  // power_loss_fs.cc

  // IOError while deactivated; ok otherwise.
  rocksdb::IOStatus CheckPowered() const;
  // The start of a write, sync, creation, rename or delete: counts it for
  // DeactivateAfter, then CheckPowered().
  rocksdb::IOStatus BeginOp();
  // Starts tracking a file opened for writing at `name` (already `size`
  // bytes long, `existed` before the open) and wraps it.
  std::unique_ptr<rocksdb::FSWritableFile> Track(const std::string& name,
                                                 std::unique_ptr<rocksdb::FSWritableFile> file,
                                                 bool existed, uint64_t size);
  // Marks every entry of dir created before `seq` durable.
  void DirSynced(const std::string& dir, uint64_t seq);
  uint64_t NextSeq();

  std::mutex power_mu_;  // with power_cv_: signals the loss to WaitDeactivated
  std::condition_variable power_cv_;
  std::atomic<bool> powered_{true};
  std::atomic<int64_t> countdown_{0};  // DeactivateAfter: operations left + 1; 0 = off
  std::atomic<uint64_t> dir_syncs_{0};
  std::atomic<int> open_files_{0};  // PowerLossFile objects alive
  mutable std::mutex mu_;
  uint64_t seq_ = 0;                                         // guarded by mu_
  std::map<std::string, std::shared_ptr<FileState>> files_;  // guarded by mu_; by normal path
};

// An Env over fs for RocksDbStoreOptions::env. After a failed background
// flush RocksDB sleeps a second before it lets the flush thread go (and DB
// Close waits for that thread); this Env's clock cuts such sleeps to a
// millisecond, so that a loss in the middle of a flush does not cost every
// test round a second. Shorter sleeps are untouched.
std::unique_ptr<rocksdb::Env> NewPowerLossEnv(const std::shared_ptr<PowerLossFs>& fs);

}  // namespace fencegate::storage::testing
