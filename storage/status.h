#pragma once
// The one error vocabulary of fencegate's storage layer. Engines convert their
// own errors (rocksdb::Status, etcd replies) into this at their edge; the proxy
// maps a Status to an HTTP reply in exactly one place (net/replies.cc).

#include <string>
#include <utility>

namespace fencegate::storage {

class Status {
 public:
  enum class Code { kOk, kNotFound, kInvalidArgument, kIoError, kCorruption, kUnavailable, kBusy, kMoving };

  Status() = default;
  static Status Ok() { return {}; }
  static Status NotFound(std::string m) { return {Code::kNotFound, std::move(m)}; }
  static Status InvalidArgument(std::string m) { return {Code::kInvalidArgument, std::move(m)}; }
  static Status IoError(std::string m) { return {Code::kIoError, std::move(m)}; }
  static Status Corruption(std::string m) { return {Code::kCorruption, std::move(m)}; }
  static Status Unavailable(std::string m) { return {Code::kUnavailable, std::move(m)}; }
  static Status Busy(std::string m) { return {Code::kBusy, std::move(m)}; }
  // The key is another replica's to forward (etcd_store.h, "Ownership"),
  // and it did not give it up in time: nothing was decided.
  static Status Moving(std::string m) { return {Code::kMoving, std::move(m)}; }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string ToString() const;

 private:
  Status(Code c, std::string m) : code_(c), message_(std::move(m)) {}
  Code code_ = Code::kOk;
  std::string message_;
};

}  // namespace fencegate::storage
