#pragma once
// AdminSession: one connection to the admin listener (docs/contract.md,
// "Admin API"), on its own port and never reachable through the proxy
// listener.
//
//   GET  /healthz                 process is up
//   GET  /readyz                  store healthy and upstream accepting TCP
//   GET  /metrics                 Prometheus text format 0.0.4
//   GET  /v1/keys/{key}           {"key","token"} or 404
//   POST /v1/keys/{key}/fence     {"token": N}, bearer token: raise to >= N;
//                                 a barrier for writes already queued
//   GET  /v1/idempotency          the idempotency gates' counters
//   GET  /v1/idempotency/{route}/{key}[?scope=S]
//                                 bearer token: what the store keeps for an
//                                 idempotency key (never a stored body or
//                                 header value)
//   PUT  /v1/test/store-faults    only with --enable-test-faults (bearer)
//
// {key}, {route} and S are percent-encoded, {key} and {route} as one path
// segment each.

#include <boost/asio/ip/tcp.hpp>
#include <functional>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <memory>
#include <optional>
#include <string>
#include <unordered_set>

#include "admin/admin_request.h"
#include "config/config.h"
#include "fence/idempotency_key.h"
#include "fence/key_queue.h"
#include "net/replies.h"
#include "storage/fault_injecting_store.h"
#include "storage/idempotency_store.h"
#include "storage/token_store.h"

namespace fencegate::proxy {

class AdminSession;

struct AdminContext {
  std::shared_ptr<const config::Config> config;
  storage::TokenStore* store = nullptr;
  // The proxy's per-key queue: the admin fence goes through it (a barrier
  // for writes already queued, KeyQueue::Fence). Null: straight to the store.
  KeyQueue* queue = nullptr;
  // The store's idempotency records (TokenStore::Idempotency()); set when a
  // route has `idempotency:`.
  storage::IdempotencyStore* idempotency = nullptr;
  // What the proxy's idempotency gates counted; nullptr: nothing (zeros).
  const IdempotencyCounters* idempotency_counters = nullptr;
  // The metrics endpoint's text (metrics/exposition.h); empty: 404.
  std::function<std::string()> metrics;
  // Set only with --enable-test-faults: installs injected store faults.
  std::function<void(const storage::FaultSpec&)> set_faults;
  std::unordered_set<AdminSession*> sessions;      // live sessions (admin thread only)
};

class AdminSession : public std::enable_shared_from_this<AdminSession> {
 public:
  AdminSession(boost::asio::ip::tcp::socket&& socket, AdminContext& context);
  ~AdminSession();
  void Run();
  void Close();

 private:
  void DoRead();
  void ReadHead();  // then the body, if any
  void OnRead(boost::beast::error_code ec);
  void Handle();
  void HandleKey(const std::string& key, bool fence);
  void HandleFaults();
  void HandleIdempotencyCounters();
  void HandleIdempotencyRecord();
  void HandleReady();
  void HandleMetrics();
  bool Authorized();  // sends 401/403 itself when not
  void Send(Reply reply);  // on the session's executor
  // For store handlers, which run on the store's thread: moves `self` and
  // the reply to the session's executor, so the session is never destroyed
  // on the store's thread.
  static void SendFromStore(std::shared_ptr<AdminSession> self, Reply reply);

  boost::beast::tcp_stream stream_;
  AdminContext& ctx_;
  boost::beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  uint64_t head_bytes_ = 0;  // of the request head, consumed so far (PutHead)
  Reply reply_;
  std::optional<ReplySerializer> serializer_;
  bool keep_alive_ = false;
  bool head_request_ = false;  // the request being answered is a HEAD
};

}  // namespace fencegate::proxy
