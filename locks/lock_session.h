#pragma once
// LockSession: one connection to the lock listener (docs/contract.md, "Lock
// service").
//
//   POST /v1/locks/{name}/acquire  {"ttl": "10s", "wait": "5s"}
//        -> 200 {"token": N, "lease": ID, "expires_in_ms": M}, or 409 lock_held
//   POST /v1/locks/{name}/renew    {"lease": ID} -> 200 {"token","lease","expires_in_ms"}
//   POST /v1/locks/{name}/release  {"lease": ID} -> 200 {"token","lease","released": true}
//
// {name} is one path segment, percent-encoded; 1 to 256 bytes once decoded,
// no control characters. Errors are JSON (net/replies.h): 400 bad_request,
// bad_lock_name, bad_ttl, bad_wait, bad_lease, ttl_too_long; 404
// unknown_lease / not_found; 405; 409 lock_held; 410 lease_expired; 503
// store_unavailable / shutting_down.

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>

#include "locks/lock_request.h"
#include "locks/lock_service.h"
#include "net/replies.h"

namespace fencegate::locks {

class LockSession;

// What the sessions of one lock listener share (its io_context thread only).
struct LockContext {
  LockService* service = nullptr;
  Duration max_ttl{0};
  uint64_t max_header_bytes = 16384;
  Duration header_timeout{10000};
  std::unordered_set<LockSession*> sessions;  // live sessions, closed at shutdown
};

class LockSession : public std::enable_shared_from_this<LockSession> {
 public:
  LockSession(boost::asio::ip::tcp::socket&& socket, LockContext& context);
  ~LockSession();
  void Run();
  void Close();

 private:
  void DoRead();
  void OnRead(boost::beast::error_code ec);
  void Handle();
  void Send(proxy::Reply reply);

  boost::beast::tcp_stream stream_;
  LockContext& ctx_;
  boost::beast::flat_buffer buffer_;
  std::optional<proxy::http::request_parser<proxy::http::string_body>> parser_;
  proxy::Reply reply_;
  std::optional<proxy::ReplySerializer> serializer_;
  bool keep_alive_ = false;
  bool head_request_ = false;  // the request being answered is a HEAD
};

}  // namespace fencegate::locks
