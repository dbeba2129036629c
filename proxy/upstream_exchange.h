#pragma once
// UpstreamExchange: the backend's side of one client connection. For each
// request its HttpSession forwards, it takes a connection from the worker's
// UpstreamPool (or adopts one the request already went out on, handoff.h),
// sends the request up (streaming a body from the client as it arrives, and
// answering 100-continue), reads the response head, relays the response to
// the client, then returns the connection to the pool and hands the key's
// lease on. A GET or HEAD without a body whose reused connection fails
// before the response started is tried once more on a new connection.
//
// Owned by its HttpSession (a member) and run on the session's thread only.
// Every asynchronous operation it starts holds the session, and with it the
// exchange. It reads the request from the session (parser, canonical target,
// intent, client stream) and ends through it: FinishRequest once the
// response went, SendReply for the answers it makes itself (413 on a body
// over the limit, 502, 504), Close when the exchange is cut.

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "config/config.h"
#include "net/deadline.h"
#include "fence/handoff.h"
#include "proxy/headers.h"
#include "fence/key_queue.h"
#include "proxy/proxy_context.h"
#include "proxy/upstream_pool.h"

namespace fencegate::proxy {

class HttpSession;

// The one buffer request and response bodies stream through, sized on first
// use and freed between requests (an idle keep-alive connection holds no
// body-sized memory).
class BodyBuffer {
 public:
  static constexpr size_t kMaxSize = size_t{64} * 1024;

  // At least min(want, kMaxSize) bytes (at least 1), capacity() in all. Not
  // zero-filled: every byte is written before it is read.
  char* Get(uint64_t want = kMaxSize);
  char* data() const { return data_.get(); }
  size_t capacity() const { return capacity_; }
  void Free() {
    data_.reset();
    capacity_ = 0;
  }

 private:
  std::unique_ptr<char[]> data_;
  size_t capacity_ = 0;
};

class UpstreamExchange {
 public:
  UpstreamExchange(HttpSession& session, Worker& worker, const config::Config& config)
      : session_(session), worker_(worker), config_(&config) {}

  // The configuration of the requests from now on (a reload); between
  // requests only. `config` outlives them (the session's snapshot).
  void SetConfig(const config::Config& config) { config_ = &config; }

  // Before each request.
  void Reset() {
    response_started_ = false;
    response_framing_ = DownstreamFraming{};
    whole_body_size_ = 0;
    expect_continue_ = false;
    upstream_reused_ = false;
    request_written_ = false;
    whole_request_ = false;
    retried_ = false;
    request_started_ = false;
  }

  // A request whose body (if any) came whole with its head: the whole
  // upstream request into whole_request() now, so that it goes in one
  // write, or is sent by the thread that hands a fenced write's key on
  // (FenceFilter::Check, handoff.h). False when the body must stream; an
  // error reading the buffered body is answered and returned in `ec`.
  bool PrepareWholeRequest(boost::beast::error_code& ec);
  // What PrepareWholeRequest built, unchanged until the request is
  // forwarded.
  std::string_view whole_request() const { return head_; }

  // The key lease of a fenced write, held until the exchange ends
  // (EndUpstream).
  // `owner`: the ownership the store decided it under (FenceVerdict), checked
  // again just before the request's first byte goes upstream.
  void Hold(KeyLease&& lease, int64_t owner = 0) {
    lease_ = std::move(lease);
    owner_ = owner;
  }
  // Forwards the request: a pooled or new connection, then request and
  // response.
  void StartForward();
  // Forwards a request that already went upstream, wholly or in part, on
  // `handed` (FenceVerdict::handed): writes the rest, then reads the response.
  void ContinueHanded(HandedConnection handed);

  // Ends the exchange: the connection goes back to the pool when `reusable`
  // and the whole response was read (else it is closed), and the key lease
  // is handed on (complete) or released. Harmless without an exchange.
  void EndUpstream(bool reusable);

  // The deadline sweep: closes the upstream stream when its operation's
  // deadline has passed (its handler then answers 504).
  void Sweep(std::chrono::steady_clock::time_point now);

  // After the response: frees what a request needed (serializers, the
  // response parser, body-sized buffers), so that an idle keep-alive
  // connection holds no body-sized memory.
  void FreeBuffers();

  // Whether a byte of the request may have gone upstream (a write was
  // started, or another thread sent it: handoff.h).
  bool request_started() const { return request_started_; }
  // The response head went to the client.
  bool response_started() const { return response_started_; }
  // The final response's parser, once its head was read.
  const http::response_parser<http::buffer_body>& response_parser() const { return *res_parser_; }

  // The body buffer, which the session borrows to read and drop a body it
  // refuses.
  BodyBuffer& body() { return body_; }

 private:
  using ec_t = boost::beast::error_code;
  using Clock = std::chrono::steady_clock;

  void OnUpstream(ec_t ec, UpstreamPool::Connection connection, bool reused);
  void OnUpstreamHeaderWritten(ec_t ec);
  // head_ from byte `from` on: a request without a body, or a whole one.
  void WriteUpstreamHead(size_t from = 0);
  void DoRequestBody();
  void OnRequestBodyRead(ec_t ec);
  void WriteUpstream();  // up_sr_'s next piece, then OnRequestBodyWritten
  void OnRequestBodyWritten(ec_t ec);
  void DoReadResponseHeader();
  void OnResponseHeader(ec_t ec);
  void DoWholeResponseBody(uint64_t length);
  void ReadMoreResponseBody();
  void OnWholeResponseBody(ec_t ec);
  // The response head, with the body in hand: whole (AppendDownstreamHead,
  // one write, no serializer) or through down_sr_.
  void WriteResponse();
  void WriteWholeResponse();
  void WriteDownstream();  // down_sr_'s next piece, then OnResponseBodyWritten
  void DoResponseBody();
  void OnResponseBodyRead(ec_t ec);
  void OnResponseBodyWritten(ec_t ec);
  void FailUpstream(ec_t ec, const char* stage);
  // A GET/HEAD without a body that is not fenced: tried once more on a new
  // connection when a reused one fails before the response started.
  bool Retryable() const;

  // PrepareWholeRequest: bodies up to this size, already read with the head.
  static constexpr uint64_t kWholeBodyMax = uint64_t{16} * 1024;
  // FreeBuffers keeps a head buffer up to this capacity: most heads fit.
  static constexpr size_t kKeptHeadCapacity = 4096;

  HttpSession& session_;
  Worker& worker_;
  const config::Config* config_;
  BodyBuffer body_;
  KeyLease lease_;
  int64_t owner_ = 0;
  UpstreamPool::Connection upstream_;
  boost::beast::flat_buffer up_buffer_;
  http::request<http::buffer_body> up_req_;  // only for a request with a body or 100-continue
  std::optional<http::request_serializer<http::buffer_body>> up_sr_;
  std::optional<http::response_parser<http::buffer_body>> res_parser_;
  http::response<http::buffer_body> down_res_;  // only for a streamed or chunked response
  std::optional<http::response_serializer<http::buffer_body>> down_sr_;
  // A head written without a serializer (AppendUpstreamHead or
  // AppendDownstreamHead), or the whole request (whole_request_).
  std::string head_;
  bool request_written_ = false;   // the whole request went upstream
  bool request_started_ = false;   // request_started()
  bool whole_request_ = false;     // head_ holds the whole upstream request
  bool response_started_ = false;  // the response head went to the client
  bool expect_continue_ = false;
  bool upstream_reused_ = false;
  bool retried_ = false;
  DownstreamFraming response_framing_;  // DecideDownstreamFraming, at the response head
  size_t whole_body_size_ = 0;          // response body bytes in body_ (DoWholeResponseBody)
  // Armed while an upstream operation is pending (Timed, WriteWhole). A
  // stream the sweep closed fails its operation with operation_aborted:
  // upstream_timed_out_ makes that a 504.
  Deadline upstream_deadline_;
  bool upstream_timed_out_ = false;
};

}  // namespace fencegate::proxy
