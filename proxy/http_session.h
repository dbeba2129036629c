#pragma once
// HttpSession: one client connection of the data plane.
//
// read head -> canonical path -> route -> fence filter (key queue, store)
// -> upstream pool -> stream request body up -> stream response down ->
// access log -> next request (keep-alive, pipelining) or close.
//
// Runs on its worker's single-threaded io_context (no strand needed); every
// asynchronous operation holds shared_from_this(). Bodies are streamed
// through one fixed buffer, never held whole.

#include <array>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "proxy/access_log.h"
#include "proxy/canonical_path.h"
#include "proxy/client_limit.h"
#include "proxy/deadline.h"
#include "proxy/fence_filter.h"
#include "proxy/headers.h"
#include "proxy/listener.h"
#include "proxy/maybe_tls_stream.h"
#include "proxy/proxy_context.h"
#include "proxy/replies.h"
#include "proxy/session_affinity.h"

namespace fencegate::proxy {

class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(Listener::Socket&& socket, ProxyContext& context, Worker& worker);
  ~HttpSession();

  void Run();
  // Run, for a client connection that moved here from another I/O thread
  // (SessionAffinity::Move) between two requests: `pending` is what it had already sent
  // of the next one(s).
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
  using Clock = std::chrono::steady_clock;
  using ec_t = boost::beast::error_code;

  // TLS listener: the handshake, within header_timeout, before the first head.
  void OnHandshake(ec_t ec);
  // After the last response: TLS close_notify (bounded), then Close().
  void CloseAfterResponse();

  // Request head and decision.
  void DoReadHeader();
  void DoWaitForRequest();  // keep-alive: wait up to idle_timeout for a byte
  void StartHeaderRead();
  void OnReadHeader(ec_t ec);
  void OnVerdict(FenceVerdict verdict);
  // A fenced write whose body (if any) came whole with its head: the whole
  // upstream request into head_ now, before the key's turn (whole_request_),
  // so that it goes in one write, or is sent by the thread that hands the
  // key on (FenceFilter::Check, handoff.h). False when it must stream; an
  // error reading the buffered body is answered (OnRequestBodyRead) and
  // returned in `ec`.
  bool PrepareWholeRequest(ec_t& ec);
  // The turn came with the request already upstream (FenceVerdict::handed).
  void ContinueHanded(HandedConnection handed);
  void SendReply(Reply reply, std::string_view outcome);
  // The canonical Destination to forward (COPY, MOVE), or nullptr.
  const CanonicalDestination* Destination() const {
    return intent_.destination ? &*intent_.destination : nullptr;
  }
  void DoDiscardBody();  // read and drop a small unread body before replying

  // Forwarding, in order.
  void StartForward();
  void OnUpstream(ec_t ec, UpstreamPool::Connection connection, bool reused);
  void OnUpstreamHeaderWritten(ec_t ec);
  void DoRequestBody();
  void OnRequestBodyRead(ec_t ec);
  void OnRequestBodyWritten(ec_t ec);
  void WriteUpstream();    // up_sr_'s next piece, then OnRequestBodyWritten
  void WriteDownstream();  // down_sr_'s next piece, then OnResponseBodyWritten
  // A request without a body, or a response whose body is all in hand and
  // not chunked: head_, appended straight from the parsed message
  // (AppendUpstreamHead, AppendDownstreamHead: no up_req_ or down_res_), and
  // the body in one write, without a serializer.
  // head_ from byte `from` on: a request without a body, or a whole one
  // (whole_request_).
  void WriteUpstreamHead(size_t from = 0);
  void WriteWholeResponse();
  template <class Socket, class Serializer>
  static bool TryWriteNow(Socket& socket, Serializer& sr, ec_t& ec);
  void DoReadResponseHeader();
  void OnResponseHeader(ec_t ec);
  void DoWholeResponseBody(uint64_t length);
  void OnWholeResponseBody(ec_t ec);
  void WriteResponse();
  void DoResponseBody();
  void OnResponseBodyRead(ec_t ec);
  void OnResponseBodyWritten(ec_t ec);

  // Endings.
  void EndUpstream(bool reusable);
  void FailUpstream(ec_t ec, const char* stage);
  // A GET/HEAD without a body that is not fenced: tried once more on a new
  // connection when a reused one fails before the response started.
  bool Retryable() const;
  void FinishRequest(bool keep_alive);
  void EndRequest();  // access log and in-flight count, once per request
  void Close();
  void AccessLog();
  // The body buffer for the next read: at least min(want, kBodyBufferSize)
  // bytes (at least 1), body_capacity_ in all.
  char* Buffer(uint64_t want = kBodyBufferSize);

  // The worker's concrete executor type, as the pool's connections; TLS when
  // the listener has tls:.
  UpstreamPool::Stream stream_;
  ProxyContext& ctx_;
  Worker& worker_;
  const config::Config& config_;
  boost::beast::flat_buffer buffer_;
  std::unique_ptr<char[]> body_buffer_;  // allocated on the first body relayed
  size_t body_capacity_ = 0;
  static constexpr size_t kBodyBufferSize = size_t{64} * 1024;
  static constexpr size_t kWaitReadSize = 4096;  // the first read of a kept-alive request
  static constexpr size_t kHeadReadSize = size_t{64} * 1024;  // the most a head read asks for
  // PrepareWholeRequest: bodies up to this size, already read with the head.
  static constexpr uint64_t kWholeBodyMax = uint64_t{16} * 1024;

  // Per request.
  std::optional<http::request_parser<http::buffer_body>> req_parser_;
  uint64_t head_bytes_ = 0;  // of the request head, consumed so far (PutHead)
  CanonicalTarget target_;
  WriteIntent intent_;
  KeyLease lease_;
  Reply reply_;  // fencegate's own answer, alive while it is written
  UpstreamPool::Connection upstream_;
  boost::beast::flat_buffer up_buffer_;
  http::request<http::buffer_body> up_req_;  // only for a request with a body or 100-continue
  std::optional<http::request_serializer<http::buffer_body>> up_sr_;
  std::optional<http::response_parser<http::buffer_body>> res_parser_;
  http::response<http::buffer_body> down_res_;  // only for a streamed or chunked response
  std::optional<http::response_serializer<http::buffer_body>> down_sr_;
  // A head written without a serializer (AppendUpstreamHead or
  // AppendDownstreamHead), or a fenced write's whole request (whole_request_).
  std::string head_;
  bool request_written_ = false;  // the whole request went upstream
  bool whole_request_ = false;    // head_ holds the whole upstream request (PrepareWholeRequest)
  bool request_keep_alive_ = false;
  bool response_started_ = false;  // the response head went to the client
  DownstreamFraming response_framing_;  // DecideDownstreamFraming, at the response head
  size_t whole_body_size_ = 0;          // response body bytes in body_buffer_ (DoWholeResponseBody)
  RequestRecord record_;  // what the access log line reports
  std::string client_ip_;
  std::string request_id_;
  uint64_t requests_served_ = 0;
  bool upstream_reused_ = false;
  bool retried_ = false;
  std::string pending_outcome_;   // SendReply's outcome while the body is discarded
  uint64_t discarded_ = 0;
  static constexpr uint64_t kDiscardLimit = uint64_t{64} * 1024;
  bool in_request_ = false;     // a request head was read and not yet ended
  bool idle_ = false;           // waiting for the first byte of a request head
  // DoWaitForRequest's read was queued for the socket's next event (not
  // completed at once): see read_attempt.h.
  bool wait_queued_ = false;
  bool expect_continue_ = false;
  ClientSlot client_slot_;  // limits.max_connections_per_client
  // Timeouts (deadline.h): armed while an operation on that stream is
  // pending, by Timed() or WriteWhole(). An upstream stream the sweep closed
  // fails its operation with operation_aborted: upstream_timed_out_ makes
  // that a 504.
  Deadline client_deadline_;
  Deadline upstream_deadline_;
  bool upstream_timed_out_ = false;
  SessionAffinity affinity_;
};

}  // namespace fencegate::proxy
