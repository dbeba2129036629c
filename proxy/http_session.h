#pragma once
// HttpSession: one client connection of the data plane. It reads the
// client's requests one at a time (keep-alive, pipelining), checks and
// classifies each head, answers itself what fencegate refuses (SendReply),
// has the fence filter decide a fenced write, and hands every request it
// forwards to its UpstreamExchange, which relays the response and then
// ends the request (FinishRequest): access log line, then the next request,
// a close, or a move to the thread of a key its writes keep waiting for
// (SessionAffinity). docs/architecture.md, "The request's way", follows a
// request through it.
//
// Thread: its Worker's single-threaded io_context (no strand, no lock);
// every asynchronous operation holds shared_from_this(). Made by the
// server's accept factory (Run) or by a move from another thread (Resume),
// and listed in its Worker's `sessions` while it lives. Owns the client
// stream, its buffers and deadline, the request's parser and decision, and
// its UpstreamExchange.

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "fence/canonical_path.h"
#include "fence/fence_filter.h"
#include "net/client_limit.h"
#include "net/deadline.h"
#include "net/listener.h"
#include "net/maybe_tls_stream.h"
#include "net/replies.h"
#include "proxy/access_log.h"
#include "proxy/headers.h"
#include "proxy/idempotency_gate.h"
#include "proxy/proxy_context.h"
#include "proxy/session_affinity.h"
#include "proxy/upstream_exchange.h"

namespace fencegate::proxy {

class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(Listener::Socket&& socket, ProxyContext& context, Worker& worker);
  ~HttpSession();

  // Starts the session: TCP_NODELAY, the TLS handshake on a TLS listener
  // (within limits.header_timeout), then the first request.
  void Run();
  // Run, for a client connection that moved here from another I/O thread
  // (SessionAffinity::Move) between two requests: `pending` is what it had
  // already sent of the next one(s).
  void Resume(std::string_view pending, uint64_t requests_served);
  // Server is draining: close now if idle between requests, else after the
  // current response. Called on the worker's thread.
  void Drain();
  // Shutdown: cancel whatever is under way now.
  void ForceClose() { Close(); }
  // The client address's connection slot, given back when the session ends.
  void HoldClientSlot(ClientSlot slot) { client_slot_ = std::move(slot); }
  // The worker's DeadlineSweep (SweepSessions): closes the client or the
  // upstream stream when its operation's deadline has passed.
  void Sweep(std::chrono::steady_clock::time_point now);

 private:
  // The exchange reads the request (parser, target, intent, client stream
  // and buffer) and ends through SendReply, FinishRequest and Close.
  friend class UpstreamExchange;
  // The gate of an idempotent write (idempotency_gate.h) reads the request
  // as the exchange does, runs it (Proceed), replays, and answers.
  friend class IdempotencyGate;

  using Clock = std::chrono::steady_clock;
  using ec_t = boost::beast::error_code;

  // TLS listener: the handshake, within header_timeout, before the first head.
  void OnHandshake(ec_t ec);
  // After the last response: TLS close_notify (bounded), then Close().
  void CloseAfterResponse();

  // Request head and decision.
  // Takes the live configuration's current snapshot; between requests only.
  void TakeSnapshot();
  void DoReadHeader();
  void DoWaitForRequest();  // keep-alive: wait up to idle_timeout for a byte
  void StartHeaderRead();
  void OnReadHeader(ec_t ec);
  // A request that may be forwarded (pass-through or fenced), once its
  // idempotency key (if any) is reserved.
  void Proceed();
  void OnVerdict(FenceVerdict verdict);
  // fencegate's own answer (`outcome` for the access log); a small body
  // still on the wire is read and dropped first (DoDiscardBody) so the
  // connection survives.
  void SendReply(Reply reply, std::string_view outcome);
  void DoDiscardBody();
  // The canonical Destination to forward (COPY, MOVE), or nullptr.
  const CanonicalDestination* Destination() const {
    return intent_.destination ? &*intent_.destination : nullptr;
  }

  // Endings.
  // The response went whole: the next request, a close, or a move.
  void FinishRequest(bool keep_alive);
  void EndRequest();  // metrics, access log and in-flight count, once per request
  // Out of flight and counted in the metrics, once per request: called as
  // the last bytes of its answer are handed to the socket (so a client that
  // reads the answer and then scrapes /metrics finds it counted), and from
  // EndRequest for a request that ends without an answer.
  void CountEnded();
  void Close();
  // The worker's RequestShard: the request's route, outcome and durations.
  void CountRequest(Clock::time_point now);
  void AccessLog(Clock::time_point now);
  // The refusal log's line for `reply`, fencegate's own error (refusal_log.h).
  void LogRefusal(const Reply& reply);

  // The worker's concrete executor type, as the pool's connections; TLS when
  // the listener has tls:.
  UpstreamPool::Stream stream_;
  ProxyContext& ctx_;
  Worker& worker_;
  // The configuration this request runs under (live_config.h): taken when
  // a head starts and again when it is in, held until the request ends.
  std::shared_ptr<const ConfigSnapshot> snapshot_;
  const config::Config* config_;  // snapshot_'s
  boost::beast::flat_buffer buffer_;
  static constexpr size_t kWaitReadSize = 4096;  // the first read of a kept-alive request
  static constexpr size_t kHeadReadSize = size_t{64} * 1024;  // the most a head read asks for

  // Per request.
  std::optional<http::request_parser<http::buffer_body>> req_parser_;
  uint64_t head_bytes_ = 0;  // of the request head, consumed so far (PutHead)
  CanonicalTarget target_;
  WriteIntent intent_;
  Reply reply_;  // fencegate's own answer, alive while it is written
  RequestRecord record_;  // what the access log line reports
  bool request_keep_alive_ = false;
  std::string client_ip_;
  std::string request_id_;
  uint64_t requests_served_ = 0;
  std::string pending_outcome_;   // SendReply's outcome while the body is discarded
  uint64_t discarded_ = 0;
  static constexpr uint64_t kDiscardLimit = uint64_t{64} * 1024;
  bool in_request_ = false;     // a request head was read and not yet ended
  bool counted_ = false;        // the request is counted (CountEnded)
  bool idle_ = false;           // waiting for the first byte of a request head
  // DoWaitForRequest's read was queued for the socket's next event (not
  // completed at once): see read_attempt.h.
  bool wait_queued_ = false;
  ClientSlot client_slot_;  // limits.max_connections_per_client
  // Armed while an operation on the client stream is pending (Timed,
  // WriteWhole: deadline.h).
  Deadline client_deadline_;
  UpstreamExchange exchange_;
  IdempotencyGate idem_;
  SessionAffinity affinity_;
};

}  // namespace fencegate::proxy
