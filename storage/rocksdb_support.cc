#include "storage/rocksdb_support.h"

#include <sys/statvfs.h>

#include <cerrno>
#include <filesystem>
#include <system_error>
#include <utility>

namespace fencegate::storage::rocksdb_support {

std::string EncodeToken(uint64_t token) {
  std::string out(kTokenBytes, '\0');
  for (size_t i = 0; i < kTokenBytes; ++i) {
    out[i] = static_cast<char>((token >> (56 - 8 * i)) & 0xff);
  }
  return out;
}

uint64_t DecodeToken(std::string_view in) {
  uint64_t token = 0;
  for (size_t i = 0; i < kTokenBytes; ++i) {
    token = (token << 8) | static_cast<unsigned char>(in[i]);
  }
  return token;
}

std::string Printable(std::string_view key) {
  constexpr size_t kMax = 64;
  std::string out;
  for (char c : key.substr(0, kMax)) {
    out += (c >= 0x20 && c < 0x7f) ? c : '?';
  }
  if (key.size() > kMax) out += "...";
  return out;
}

Status FromRocks(const rocksdb::Status& s, const std::string& context) {
  if (s.ok()) return Status::Ok();
  std::string msg = context + ": " + s.ToString();
  if (s.IsNotFound()) return Status::NotFound(std::move(msg));
  if (s.IsCorruption()) return Status::Corruption(std::move(msg));
  if (s.IsBusy() || s.IsTryAgain()) return Status::Busy(std::move(msg));
  if (s.IsIOError()) return Status::IoError(std::move(msg));  // incl. NoSpace
  if (s.IsInvalidArgument() || s.IsNotSupported()) {
    return Status::InvalidArgument(std::move(msg));
  }
  if (s.IsShutdownInProgress() || s.IsAborted() || s.IsIncomplete() ||
      s.IsTimedOut()) {
    return Status::Unavailable(std::move(msg));
  }
  return Status::IoError(std::move(msg));
}

namespace {

Status NoSpaceLeft(uint64_t available, const std::string& path, uint64_t needed = kMinFreeBytes) {
  return Status::IoError(
      "no space left for the token store: " + std::to_string(available) +
      " bytes free on the file system of " + path + ", at least " + std::to_string(needed) +
      " needed; free space there (fencegate recovers by itself)");
}

}  // namespace

Status FreeSpaceGuard::StatFreeBytes(const std::string& path, uint64_t* available) {
  struct statvfs fs {};
  if (statvfs(path.c_str(), &fs) != 0) {
    const int err = errno;  // message() is thread-safe, std::strerror() is not
    return Status::IoError("cannot stat the file system of " + path + ": " +
                           std::generic_category().message(err));
  }
  *available = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
  return Status::Ok();
}

Status CheckFreeSpace(const RocksDbStoreOptions& options) {
  uint64_t available = 0;
  if (Status s = FreeSpaceGuard::StatFreeBytes(options.path, &available); !s.ok()) {
    return s;
  }
  if (available < kMinFreeBytes) return NoSpaceLeft(available, options.path);
  return Status::Ok();
}

Status CheckRoomToOpen(const RocksDbStoreOptions& options) {
  namespace fs = std::filesystem;
  uint64_t replayed = 0;  // what opening writes out again
  std::error_code ec;
  for (fs::directory_iterator it(options.path, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path& name = it->path();
    if (name.extension() != ".log" && name.extension() != ".journal") continue;
    std::error_code size_ec;
    const uintmax_t size = it->file_size(size_ec);
    if (!size_ec) replayed += size;
  }
  // A directory that cannot be listed is reported by the open itself.
  uint64_t available = 0;
  if (Status s = FreeSpaceGuard::StatFreeBytes(options.path, &available); !s.ok()) {
    // Not made yet: the open makes it (or says why it cannot).
    return Status::Ok();
  }
  const uint64_t needed = kMinFreeBytes + replayed;
  if (available >= needed) return Status::Ok();
  return Status::IoError(
      "no space left to open the token store: " + std::to_string(available) +
      " bytes free on the file system of " + options.path + ", at least " +
      std::to_string(needed) + " needed (" + std::to_string(kMinFreeBytes) +
      " to keep free, and " + std::to_string(replayed) +
      " of write-ahead log that opening writes out); free space there and start again");
}

FreeSpaceGuard::FreeSpaceGuard(std::string path, FreeBytesFn free_bytes)
    : path_(std::move(path)), free_bytes_(std::move(free_bytes)) {
  if (!free_bytes_) {
    free_bytes_ = [this](uint64_t* available) { return StatFreeBytes(path_, available); };
  }
}

Status FreeSpaceGuard::Check(uint64_t bytes, Clock::time_point now) {
  if (bytes < room_ && now - asked_at_ < kRecheck) {
    room_ -= bytes;
    return Status::Ok();
  }
  room_ = 0;
  ++asks_;
  uint64_t available = 0;
  if (Status s = free_bytes_(&available); !s.ok()) return s;
  asked_at_ = now;
  const uint64_t floor = kMinFreeBytes + (pending_ ? pending_() : 0);
  if (available < floor + bytes) return NoSpaceLeft(available, path_, floor + bytes);
  const uint64_t above_floor = available - floor;
  if (above_floor > kHeadroom + bytes) room_ = above_floor - kHeadroom - bytes;
  return Status::Ok();
}

}  // namespace fencegate::storage::rocksdb_support
