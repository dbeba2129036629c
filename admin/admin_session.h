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
//   POST /v1/reload               bearer token: reads the configuration file
//                                 again and applies it, or answers why not
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
#include <string_view>
#include <unordered_set>
#include <vector>

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

// What a reload did (POST /v1/reload, SIGHUP).
struct ReloadOutcome {
  bool applied = false;
  // Refused: "invalid_config" (the file does not load or validate) or
  // "restart_required" (it changes a field bound at start).
  std::string error;
  std::string message;              // what the log says, too
  std::vector<std::string> fields;  // restart_required: one message per field
  std::string source;               // the file read
  size_t routes = 0;                // applied: the new configuration's routes
};

struct AdminContext {
  // The running configuration (a reload replaces it); on the admin thread.
  std::function<std::shared_ptr<const config::Config>()> config;
  // Reads the configuration file again and applies it or refuses it whole;
  // on the admin thread. Empty: reload is not offered (404).
  std::function<ReloadOutcome()> reload;
  storage::TokenStore* store = nullptr;
  // The proxy's per-key queue: the admin fence goes through it (a barrier
  // for writes already queued, KeyQueue::Fence). Null: straight to the store.
  KeyQueue* queue = nullptr;
  // The path of the tree a key fences under the running routes
  // (proxy::TreePathOfKey), for the admin fence to raise that path's node
  // with the key; empty or nullopt: the key alone is raised.
  std::function<std::optional<std::string>(std::string_view key)> tree_path_of_key;
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
  // GET /v1/paths{path}: the tree of paths at one path (path_answer.h).
  void HandlePath();
  void HandleReady();
  void HandleMetrics();
  void HandleReload();
  bool Authorized();  // sends 401/403 itself when not
  void Send(Reply reply);  // on the session's executor
  // For store handlers, which run on the store's thread: moves `self` and
  // the reply to the session's executor, so the session is never destroyed
  // on the store's thread.
  static void SendFromStore(std::shared_ptr<AdminSession> self, Reply reply);

  boost::beast::tcp_stream stream_;
  AdminContext& ctx_;
  // ctx_.config() when the request began: what this request is judged by.
  std::shared_ptr<const config::Config> config_;
  boost::beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  uint64_t head_bytes_ = 0;  // of the request head, consumed so far (PutHead)
  Reply reply_;
  std::optional<ReplySerializer> serializer_;
  bool keep_alive_ = false;
  bool head_request_ = false;  // the request being answered is a HEAD
};

}  // namespace fencegate::proxy
