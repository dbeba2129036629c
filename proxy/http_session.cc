#include "proxy/http_session.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/write.hpp>

#include "proxy/head_limit.h"
#include "proxy/headers.h"
#include "proxy/read_attempt.h"
#include "proxy/request_checks.h"
#include "proxy/write_whole.h"

namespace fencegate::proxy {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;

namespace {

bool IsTimeout(const beast::error_code& ec) {
  return ec && (ec == beast::error::timeout || ec == asio::error::timed_out);
}

// Feeds `parser` what `buffer` already holds, as http::async_read would
// before its first read, but without the asynchronous round trip: true when
// that was enough (`done(parser)`, or an error other than need_more, in
// `ec`); false when bytes must still be read (then async_read carries on
// from where this stopped).
template <class Parser, class Done>
bool ParseBuffered(Parser& parser, beast::flat_buffer& buffer, Done done, beast::error_code& ec) {
  while (!done(parser)) {
    if (buffer.size() == 0) return false;
    size_t used = parser.put(buffer.data(), ec);
    buffer.consume(used);
    if (ec && ec == http::error::need_more) {
      ec = {};
      return false;
    }
    if (ec) return true;
    if (used == 0) return false;  // no progress: let async_read decide
  }
  return true;
}

constexpr auto kMessageDone = [](const auto& parser) { return parser.is_done(); };

// Responses that never carry a body, whatever their headers say.
}  // namespace

HttpSession::HttpSession(Listener::Socket&& socket, ProxyContext& context, Worker& worker)
    : stream_(UpstreamPool::Tcp(std::move(socket)), context.listener_tls.get()),
      ctx_(context),
      worker_(worker),
      config_(*context.config),
      affinity_(context, worker, /*can_move=*/!stream_.tls()) {
  ctx_.active_connections.fetch_add(1, std::memory_order_relaxed);
}

HttpSession::~HttpSession() {
  worker_.sessions.erase(this);
  ctx_.active_connections.fetch_sub(1, std::memory_order_relaxed);
}

void HttpSession::Run() {
  worker_.sessions.insert(this);
  worker_.sweep.Ensure();
  beast::error_code ec;
  stream_.socket().set_option(tcp::no_delay(true), ec);
  // For TryWriteNow, plain TCP only (TLS bytes go through OpenSSL); async
  // operations do not mind.
  if (!stream_.tls()) stream_.socket().non_blocking(true, ec);
  auto peer = stream_.socket().remote_endpoint(ec);
  if (!ec) {
    auto address = peer.address();
    if (address.is_v6() && address.to_v6().is_v4_mapped()) {
      address = asio::ip::make_address_v4(asio::ip::v4_mapped, address.to_v6());
    }
    client_ip_ = address.to_string();
  }
  if (auto* tls = stream_.tls_stream()) {
    idle_ = true;  // no request yet: a drain closes it
    return tls->async_handshake(
        asio::ssl::stream_base::server,
        Timed(client_deadline_, config_.limits.header_timeout,
              [self = shared_from_this()](ec_t ec) { self->OnHandshake(ec); }));
  }
  DoReadHeader();
}

void HttpSession::OnHandshake(ec_t ec) {
  if (ec) {
    // Scanners, plain HTTP on the TLS port, clients without a certificate
    // (mTLS), clients that distrust ours: this connection only.
    spdlog::info("TLS handshake with {} failed: {}", client_ip_, ec.message());
    return Close();
  }
  // Every byte must now go through OpenSSL: keep the socket out of user
  // non-blocking mode, which is what a write-now path to the bare socket
  // keys on (asynchronous operations set what they need themselves).
  beast::error_code ignored;
  stream_.socket().non_blocking(false, ignored);
  DoReadHeader();
}

void HttpSession::CloseAfterResponse() {
  auto* tls = stream_.tls_stream();
  if (tls == nullptr) {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    return Close();
  }
  // close_notify tells the client the response was not cut short; its
  // answer is awaited only briefly (many clients just close).
  static constexpr std::chrono::milliseconds kTlsShutdownTimeout{1000};
  tls->async_shutdown(
      Timed(client_deadline_,
            std::min<std::chrono::milliseconds>(config_.limits.header_timeout, kTlsShutdownTimeout),
            [self = shared_from_this()](ec_t) { self->Close(); }));
}

void HttpSession::Drain() {
  if (idle_) Close();
}

char* HttpSession::Buffer(uint64_t want) {
  // Sized to the body when its length is known (a 16-byte PUT does not need
  // 64 KiB), and not zero-filled: every byte is written before it is read.
  size_t size = static_cast<size_t>(std::clamp<uint64_t>(want, 1, kBodyBufferSize));
  if (body_capacity_ < size) {
    body_buffer_ = std::make_unique_for_overwrite<char[]>(size);
    body_capacity_ = size;
  }
  return body_buffer_.get();
}

// ---------------------------------------------------------------------------
// Request head and the decision.

void HttpSession::DoReadHeader() {
  if (ctx_.draining.load(std::memory_order_relaxed) && buffer_.size() == 0) return Close();
  req_parser_.emplace();
  head_bytes_ = 0;  // PutHead sets the parser's header_limit
  req_parser_->body_limit(config_.limits.max_body_bytes);
  intent_ = WriteIntent{};
  request_id_.clear();
  record_.Reset();
  response_started_ = false;
  response_framing_ = DownstreamFraming{};
  whole_body_size_ = 0;
  expect_continue_ = false;
  upstream_reused_ = false;
  request_written_ = false;
  whole_request_ = false;
  retried_ = false;
  idle_ = buffer_.size() == 0;
  // A new connection must deliver its first head within header_timeout; a
  // kept-alive one may stay silent for idle_timeout, and then the head that
  // follows has header_timeout from its first byte.
  if (idle_ && requests_served_ > 0) return DoWaitForRequest();
  StartHeaderRead();
}

void HttpSession::DoWaitForRequest() {
  stream_.async_read_some(buffer_.prepare(kWaitReadSize),
                          Timed(client_deadline_, config_.limits.idle_timeout,
                                [self = shared_from_this()](ec_t ec, size_t n) {
                                  self->buffer_.commit(n);
                                  if (ec) return self->Close();  // idle timeout, EOF or reset
                                  // Queued, so its recv came from the event
                                  // just handled, and short: the socket was
                                  // drained then, and no event was seen
                                  // since. The next wait needs no empty
                                  // recv first (read_attempt.h).
                                  if (self->wait_queued_ && n < kWaitReadSize) {
                                    SkipNextReadAttempt(self->stream_.socket());
                                  }
                                  self->idle_ = false;
                                  self->StartHeaderRead();
                                }));
  // Nothing else is queued on the client's socket while a kept-alive
  // connection waits: its response went whole, and no read was pending.
  wait_queued_ = !stream_.tls() && ReadIsQueued(stream_.socket());
}

void HttpSession::StartHeaderRead() {
  // Usually the whole head came with the first read (DoWaitForRequest, or
  // behind the previous request when pipelined). The head is read here
  // rather than by http::async_read_header so that limits.max_header_bytes
  // bounds all of it, however many reads it takes (head_limit.h).
  ec_t ec;
  if (PutHead(*req_parser_, buffer_, config_.limits.max_header_bytes, &head_bytes_, ec)) {
    client_deadline_.Disarm();
    return OnReadHeader(ec);
  }
  // One deadline for the whole head, armed at its first read.
  if (!client_deadline_.armed()) client_deadline_.Arm(config_.limits.header_timeout);
  stream_.async_read_some(buffer_.prepare(beast::read_size(buffer_, kHeadReadSize)),
                          [self = shared_from_this()](ec_t ec, size_t n) {
                            self->buffer_.commit(n);
                            if (!ec) return self->StartHeaderRead();
                            self->client_deadline_.Disarm();
                            // As Beast's reads say it: EOF within a head is
                            // a partial message, before one the end of the
                            // stream.
                            if (ec == asio::error::eof) {
                              ec = self->req_parser_->got_some() ? http::error::partial_message
                                                                 : http::error::end_of_stream;
                            }
                            self->OnReadHeader(ec);
                          });
}

void HttpSession::OnReadHeader(ec_t ec) {
  idle_ = false;
  record_.started = Clock::now();
  // `ec &&` first, here and below: a comparison with an error enum costs a
  // category lookup, and most reads succeed.
  if (ec && (ec == http::error::end_of_stream || ec == asio::error::eof ||
             ec == asio::error::operation_aborted || ec == asio::error::connection_reset)) {
    return Close();
  }
  if (IsTimeout(ec)) return Close();
  in_request_ = true;
  ctx_.requests_in_flight.fetch_add(1, std::memory_order_relaxed);
  request_keep_alive_ = false;
  if (ec && ec == http::error::header_limit) {
    return SendReply(MakeError(http::status::request_header_fields_too_large, "headers_too_large",
                               "the request head is larger than limits.max_header_bytes (" +
                                   std::to_string(config_.limits.max_header_bytes) + ")"),
                     "bad_request");
  }
  if (ec && ec == http::error::body_limit) {
    return SendReply(MakeError(http::status::payload_too_large, "body_too_large",
                               "the request body is larger than limits.max_body_bytes (" +
                                   std::to_string(config_.limits.max_body_bytes) + ")"),
                     "bad_request");
  }
  if (ec && ec == http::error::bad_target) {
    // Beast refuses control bytes (NUL among them) in the target itself.
    return SendReply(MakeError(http::status::bad_request, "bad_path",
                               "the request target contains a byte that is not allowed"),
                     "bad_request");
  }
  if (ec) {
    return SendReply(MakeError(http::status::bad_request, "bad_request",
                               "malformed HTTP request: " + ec.message()),
                     "bad_request");
  }
  auto& req = req_parser_->get();
  request_keep_alive_ = req.keep_alive();
  if (auto id = req.find("X-Request-Id"); id != req.end() && IsValidRequestId(id->value())) {
    request_id_.assign(id->value());
  } else {
    NewRequestId(&request_id_);
  }

  if (HeadProblem problem = CheckHead(req, &target_); !problem.ok()) {
    if (problem.close) request_keep_alive_ = false;
    return SendReply(MakeError(problem.status, problem.code, problem.message),
                     "bad_request");
  }
  Classify(ctx_.fence_settings, *ctx_.router, req.method_string(), target_.path, req.base(),
           &intent_);
  if (!intent_.shadow_violation.empty()) {
    ctx_.fence->CountShadowViolation();
    spdlog::warn("shadow: would have refused {} {} ({}), forwarding", req.method_string(),
                 target_.path, intent_.shadow_violation);
  }
  switch (intent_.kind) {
    case WriteIntent::Kind::kReject:
      return SendReply(std::move(*intent_.reply), intent_.outcome);
    case WriteIntent::Kind::kPassThrough:
      if (!req_parser_->is_done()) {
        // A small body that came with its head goes out with it in one
        // write, as a fenced write's does; a larger one streams.
        ec_t body_ec;
        PrepareWholeRequest(body_ec);
        if (body_ec) return;  // answered
      }
      return StartForward();
    case WriteIntent::Kind::kFence: {
      ec_t body_ec;
      bool whole = PrepareWholeRequest(body_ec);
      if (body_ec) return;  // answered
      ctx_.fence->Check(
          intent_, stream_.get_executor(),
          [self = shared_from_this()](FenceVerdict v) { self->OnVerdict(std::move(v)); },
          whole ? std::string_view(head_) : std::string_view{});
      return;
    }
  }
}

void HttpSession::OnVerdict(FenceVerdict verdict) {
  if (!verdict.shadow_violation.empty()) {
    intent_.shadow_violation = verdict.shadow_violation;
    spdlog::warn("shadow: would have refused {} key={} token={} ({}, current {}), forwarding",
                 req_parser_->get().method_string(), intent_.key, intent_.token,
                 verdict.shadow_violation, verdict.current);
  }
  if (!verdict.forward) return SendReply(std::move(*verdict.reply), verdict.outcome);
  affinity_.NoteTurn(verdict.lease, intent_.key);
  lease_ = std::move(verdict.lease);
  if (verdict.handed) return ContinueHanded(std::move(*verdict.handed));
  StartForward();
}

bool HttpSession::PrepareWholeRequest(ec_t& ec) {
  auto& parser = *req_parser_;
  // 100-continue: the client may wait for our go-ahead (OnUpstream);
  // chunked: the head says chunked, and the body would have to be framed again.
  if (ExpectsContinue(parser.get().base()) || parser.chunked()) return false;
  size_t n = 0;
  if (!parser.is_done()) {
    auto remaining = parser.content_length_remaining();
    if (!remaining || *remaining > kWholeBodyMax || *remaining > buffer_.size()) return false;
    auto& body = parser.get().body();
    body.data = Buffer(*remaining);
    body.size = body_capacity_;
    ParseBuffered(parser, buffer_, kMessageDone, ec);
    // Not done cannot be: the body was all in buffer_, and its buffer fits it.
    if (!ec && !parser.is_done()) ec = http::error::partial_message;
    if (ec) {
      OnRequestBodyRead(ec);
      return false;
    }
    n = body_capacity_ - body.size;
    record_.bytes_in += n;
  }
  head_.clear();
  AppendUpstreamHead(parser, target_, config_, client_ip_, request_id_, &head_, Destination());
  if (n > 0) head_.append(body_buffer_.get(), n);
  whole_request_ = true;
  return true;
}

void HttpSession::ContinueHanded(HandedConnection handed) {
  record_.outcome = "forwarded";
  record_.upstream_started = handed.sent_at;
  upstream_timed_out_ = false;
  const size_t sent = handed.sent;
  ec_t ec;
  upstream_ = worker_.pool.Adopt(std::move(handed), ec);
  // The request may have gone whole: no second try (never for a fenced write).
  if (!upstream_) return FailUpstream(ec, "take over connection");
  upstream_reused_ = true;
  up_buffer_.clear();
  expect_continue_ = false;
  request_written_ = false;
  spdlog::debug("key {}: request {} sent upstream by the thread that handed the key on ({} of {} "
                "bytes)",
                intent_.key, request_id_, sent, head_.size());
  if (sent < head_.size()) return WriteUpstreamHead(sent);
  request_written_ = true;
  DoReadResponseHeader();
}

void HttpSession::SendReply(Reply reply, std::string_view outcome) {
  // A refused request's body is still on the wire. A small one is read and
  // dropped so the connection (and requests pipelined behind it) survives;
  // a large one, or one the client waits to send (100-continue), closes it.
  if (request_keep_alive_ && in_request_ && req_parser_ && !req_parser_->is_done() &&
      !ExpectsContinue(req_parser_->get().base()) &&
      !ctx_.draining.load(std::memory_order_relaxed)) {
    reply_ = std::move(reply);
    pending_outcome_ = outcome;
    discarded_ = 0;
    return DoDiscardBody();
  }
  record_.outcome = outcome;
  record_.status = reply.result_int();
  // Unread body bytes would be taken for the next request: close instead.
  bool keep_alive = request_keep_alive_ && req_parser_ && req_parser_->is_done() &&
                    !ctx_.draining.load(std::memory_order_relaxed);
  reply.version(req_parser_ && req_parser_->get().version() == 10 ? 10 : 11);
  reply.keep_alive(keep_alive);
  if (!request_id_.empty()) reply.set("X-Request-Id", request_id_);
  reply_ = std::move(reply);
  record_.bytes_out += reply_.body().size();
  http::async_write(stream_, reply_,
                    Timed(client_deadline_, config_.limits.idle_timeout,
                          [self = shared_from_this(), keep_alive](ec_t ec, size_t) {
                            if (ec) return self->Close();
                            self->FinishRequest(keep_alive);
                          }));
}

void HttpSession::DoDiscardBody() {
  if (req_parser_->is_done() || discarded_ > kDiscardLimit) {
    if (!req_parser_->is_done()) request_keep_alive_ = false;
    return SendReply(std::move(reply_), pending_outcome_);
  }
  auto& body = req_parser_->get().body();
  body.data = Buffer();
  body.size = body_capacity_;
  http::async_read(
      stream_, buffer_, *req_parser_,
      Timed(client_deadline_, config_.limits.idle_timeout,
            [self = shared_from_this()](ec_t ec, size_t) {
              if (ec && ec == http::error::need_buffer) ec = {};
              if (ec) {
                self->request_keep_alive_ = false;  // broken or oversized body: answer, then close
                return self->SendReply(std::move(self->reply_), self->pending_outcome_);
              }
              self->discarded_ += self->body_capacity_ - self->req_parser_->get().body().size;
              self->DoDiscardBody();
            }));
}

// ---------------------------------------------------------------------------
// Forwarding: upstream connection, request head and body.

void HttpSession::StartForward() {
  record_.outcome = "forwarded";
  record_.upstream_started = Clock::now();
  upstream_timed_out_ = false;
  // A retry always takes a new connection: the pooled one just failed.
  worker_.pool.Acquire(
      [self = shared_from_this()](ec_t ec, UpstreamPool::Connection c, bool reused) {
        self->OnUpstream(ec, std::move(c), reused);
      },
      /*fresh=*/retried_, /*probe=*/!Retryable());
}

void HttpSession::OnUpstream(ec_t ec, UpstreamPool::Connection connection, bool reused) {
  if (ec) return FailUpstream(ec, "connect");
  upstream_ = std::move(connection);
  upstream_reused_ = reused;
  up_buffer_.clear();

  expect_continue_ = ExpectsContinue(req_parser_->get().base()) && !req_parser_->is_done();
  request_written_ = false;
  if (whole_request_) return WriteUpstreamHead();  // built by PrepareWholeRequest
  if (req_parser_->is_done() && !expect_continue_) {
    // No body (the head alone completed the request): one write of the
    // head, appended straight from the parsed request (up_req_ is not used).
    head_.clear();
    AppendUpstreamHead(*req_parser_, target_, config_, client_ip_, request_id_, &head_,
                       Destination());
    // A chunked body complete already is an empty one read by an earlier
    // try (a retry: Retryable() wants no body bytes): its head says chunked,
    // so the last chunk must follow, or the backend waits for it.
    if (req_parser_->chunked()) head_.append("0\r\n\r\n");
    return WriteUpstreamHead();
  }
  BuildUpstreamRequest(*req_parser_, target_, config_, client_ip_, request_id_, &up_req_,
                       Destination());
  up_req_.body().data = nullptr;
  up_req_.body().size = 0;
  up_req_.body().more = !req_parser_->is_done();
  up_sr_.emplace(up_req_);
  if (!expect_continue_) {
    // The head goes out with the first piece of the body (or alone when
    // there is none): one write, not two, for a small request.
    return DoRequestBody();
  }
  http::async_write_header(*upstream_, *up_sr_,
                           Timed(upstream_deadline_, config_.upstream.timeout,
                                 [self = shared_from_this()](ec_t ec, size_t) {
                                   self->OnUpstreamHeaderWritten(ec);
                                 }));
}

void HttpSession::OnUpstreamHeaderWritten(ec_t ec) {
  if (ec) return FailUpstream(ec, "write request head");
  if (expect_continue_) {
    // The client waits for our go-ahead before it sends the body.
    expect_continue_ = false;
    static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    return asio::async_write(stream_, asio::buffer(kContinue.data(), kContinue.size()),
                             Timed(client_deadline_, config_.limits.idle_timeout,
                                   [self = shared_from_this()](ec_t ec, size_t) {
                                     if (ec) return self->FailUpstream(ec, "client gone");
                                     self->DoRequestBody();
                                   }));
  }
  DoRequestBody();
}

void HttpSession::WriteUpstreamHead(size_t from) {
  WriteWhole(*upstream_, {asio::buffer(head_) + from, asio::const_buffer()}, upstream_deadline_,
             config_.upstream.timeout, [self = shared_from_this()](ec_t ec, bool at_once) {
               if (ec) return self->FailUpstream(ec, "write request head");
               self->request_written_ = true;
               // Written in this handler: the response cannot have raised
               // an event the loop has seen, so the read need not try recv
               // before it waits (read_attempt.h). Not through TLS, whose
               // reads go through OpenSSL's own buffer.
               if (at_once && !self->upstream_->tls() && self->up_buffer_.size() == 0) {
                 SkipNextReadAttempt(self->upstream_->socket());
               }
               self->DoReadResponseHeader();
             });
}

void HttpSession::DoRequestBody() {
  if (up_sr_->is_done()) {
    request_written_ = true;
    return DoReadResponseHeader();
  }
  if (!req_parser_->is_done()) {
    auto remaining = req_parser_->content_length_remaining();
    uint64_t want = remaining ? *remaining : kBodyBufferSize;
    auto& body = req_parser_->get().body();
    body.data = Buffer(want);
    body.size = body_capacity_;
    // Beast sizes each read by the buffer's spare capacity: make it large so
    // a body moves in 64 KiB reads, not in the few hundred bytes left over
    // from the head. Not needed when the whole body came with the head.
    if (want > buffer_.size()) {
      buffer_.reserve(buffer_.size() + std::min<uint64_t>(want - buffer_.size(), kBodyBufferSize));
    }
    ec_t ec;
    if (ParseBuffered(*req_parser_, buffer_, kMessageDone, ec)) return OnRequestBodyRead(ec);
    http::async_read(stream_, buffer_, *req_parser_,
                     Timed(client_deadline_, config_.limits.idle_timeout,
                           [self = shared_from_this()](ec_t ec, size_t) {
                             self->OnRequestBodyRead(ec);
                           }));
    return;
  }
  up_req_.body().data = nullptr;
  up_req_.body().size = 0;
  up_req_.body().more = false;
  WriteUpstream();
}

void HttpSession::OnRequestBodyRead(ec_t ec) {
  if (ec && ec == http::error::need_buffer) ec = {};
  if (ec && ec == http::error::body_limit) {
    // Counted as it streamed: the upstream got a partial body; drop that
    // connection so the partial request can never complete.
    EndUpstream(false);
    request_keep_alive_ = false;
    return SendReply(MakeError(http::status::payload_too_large, "body_too_large",
                               "the request body is larger than limits.max_body_bytes (" +
                                   std::to_string(config_.limits.max_body_bytes) + ")"),
                     "bad_request");
  }
  if (ec) {
    // The client went away or sent a broken body: abandon the exchange.
    spdlog::debug("client body read failed: {}", ec.message());
    EndUpstream(false);
    record_.outcome = "client_error";
    return Close();
  }
  auto& body = req_parser_->get().body();
  size_t n = body_capacity_ - body.size;
  record_.bytes_in += n;
  // No new bytes (the read only completed the message, e.g. an empty
  // chunked body): hand the serializer no buffer, or it writes a zero-size
  // chunk, which is a last-chunk, before the real last-chunk.
  up_req_.body().data = n ? body_buffer_.get() : nullptr;
  up_req_.body().size = n;
  up_req_.body().more = !req_parser_->is_done();
  WriteUpstream();
}

// Both sockets are in non-blocking mode (Run(), UpstreamPool::Connect):
// a write is first tried at once, and only what the socket does not take
// now goes through an asynchronous write (with its timeout). A small
// request or response is usually taken whole, which saves the asynchronous
// operation, its timer and a trip through the event loop.
template <class Socket, class Serializer>
bool HttpSession::TryWriteNow(Socket& socket, Serializer& sr, ec_t& ec) {
  if (!socket.non_blocking()) return false;
  http::write(socket, sr, ec);
  if (ec && (ec == asio::error::would_block || ec == asio::error::try_again)) {
    ec = {};
    return false;  // the rest goes asynchronously
  }
  return true;  // all written, need_buffer (the next piece is not read yet) or an error
}

void HttpSession::WriteUpstream() {
  ec_t ec;
  if (TryWriteNow(upstream_->socket(), *up_sr_, ec)) return OnRequestBodyWritten(ec);
  http::async_write(*upstream_, *up_sr_,
                    Timed(upstream_deadline_, config_.upstream.timeout,
                          [self = shared_from_this()](ec_t ec, size_t) {
                            self->OnRequestBodyWritten(ec);
                          }));
}

void HttpSession::WriteDownstream() {
  ec_t ec;
  if (TryWriteNow(stream_.socket(), *down_sr_, ec)) return OnResponseBodyWritten(ec);
  http::async_write(stream_, *down_sr_,
                    Timed(client_deadline_, config_.limits.idle_timeout,
                          [self = shared_from_this()](ec_t ec, size_t) {
                            self->OnResponseBodyWritten(ec);
                          }));
}

void HttpSession::OnRequestBodyWritten(ec_t ec) {
  if (ec && ec == http::error::need_buffer) ec = {};
  if (ec) return FailUpstream(ec, "write request body");
  DoRequestBody();
}

// ---------------------------------------------------------------------------
// Forwarding: response head and body.

void HttpSession::DoReadResponseHeader() {
  res_parser_.emplace();
  res_parser_->header_limit(static_cast<uint32_t>(
      std::max<uint64_t>(config_.limits.max_header_bytes, uint64_t{64} * 1024)));
  res_parser_->body_limit(boost::none);
  if (req_parser_->get().method() == http::verb::head) res_parser_->skip(true);
  http::async_read_header(*upstream_, up_buffer_, *res_parser_,
                          Timed(upstream_deadline_, config_.upstream.timeout,
                                [self = shared_from_this()](ec_t ec, size_t) {
                                  self->OnResponseHeader(ec);
                                }));
}

void HttpSession::OnResponseHeader(ec_t ec) {
  if (ec) return FailUpstream(ec, "read response head");
  auto& res = res_parser_->get();
  unsigned status = res.result_int();
  if (status / 100 == 1) {
    if (status == 101) return FailUpstream(http::error::bad_version, "upgrade not supported");
    return DoReadResponseHeader();  // interim response: wait for the final one
  }
  // Only the framing now; the head is built in WriteResponse, as text when
  // the response goes whole, else as down_res_ for the serializer.
  const auto& req = req_parser_->get();
  response_framing_ = DecideDownstreamFraming(
      *res_parser_, req.method() == http::verb::head, req.version() >= 11,
      request_keep_alive_ && !ctx_.draining.load(std::memory_order_relaxed));
  request_keep_alive_ = response_framing_.keep_alive;
  record_.status = status;
  whole_body_size_ = 0;
  if (!res_parser_->is_done()) {
    // A small body of known length is read whole first, so that head and
    // body go to the client in one write; a larger or open-ended one is
    // streamed behind the head.
    if (auto length = res_parser_->content_length_remaining(); length && *length <= kBodyBufferSize) {
      return DoWholeResponseBody(*length);
    }
  }
  WriteResponse();
}

void HttpSession::DoWholeResponseBody(uint64_t length) {
  auto& body = res_parser_->get().body();
  body.data = Buffer(length);
  body.size = body_capacity_;
  if (length > up_buffer_.size()) up_buffer_.reserve(up_buffer_.size() + length);
  ec_t ec;
  if (ParseBuffered(*res_parser_, up_buffer_, kMessageDone, ec)) return OnWholeResponseBody(ec);
  http::async_read(*upstream_, up_buffer_, *res_parser_,
                   Timed(upstream_deadline_, config_.upstream.timeout,
                         [self = shared_from_this()](ec_t ec, size_t) {
                           self->OnWholeResponseBody(ec);
                         }));
}

void HttpSession::OnWholeResponseBody(ec_t ec) {
  if (ec && ec == http::error::need_buffer) ec = {};
  // Nothing went to the client yet: a failure here is answered 502/504 (and
  // a GET/HEAD on a reused connection is retried), like a failed head.
  if (ec) return FailUpstream(ec, "read response body");
  whole_body_size_ = body_capacity_ - res_parser_->get().body().size;
  record_.bytes_out += whole_body_size_;
  WriteResponse();
}

void HttpSession::WriteResponse() {
  // The head, with whatever body is in hand (whole_body_size_ bytes); the
  // rest (if any) follows from DoResponseBody. request_keep_alive_ already
  // holds what the framing allows, so the head's Connection says the same.
  if (res_parser_->is_done()) EndUpstream(true);
  const auto& req = req_parser_->get();
  const bool head_request = req.method() == http::verb::head;
  const bool client_http11 = req.version() >= 11;
  if (res_parser_->is_done() && !response_framing_.chunked) {
    // All of it is in hand and goes as is: head and body in one write, the
    // head appended straight from the parsed response (down_res_ is not used).
    head_.clear();
    AppendDownstreamHead(*res_parser_, head_request, client_http11, request_keep_alive_,
                         request_id_, &head_);
    response_started_ = true;
    return WriteWholeResponse();
  }
  BuildDownstreamResponse(*res_parser_, head_request, client_http11, request_keep_alive_,
                          &down_res_);
  down_res_.set("X-Request-Id", request_id_);
  // No bytes in hand: no buffer for the serializer (as in OnRequestBodyRead).
  down_res_.body().data = whole_body_size_ ? body_buffer_.get() : nullptr;
  down_res_.body().size = whole_body_size_;
  down_res_.body().more = !res_parser_->is_done();
  down_sr_.emplace(down_res_);
  response_started_ = true;
  WriteDownstream();
}

void HttpSession::WriteWholeResponse() {
  WriteWhole(stream_,
             {asio::buffer(head_), asio::const_buffer(body_buffer_.get(), whole_body_size_)},
             client_deadline_, config_.limits.idle_timeout,
             [self = shared_from_this()](ec_t ec, bool) {
               if (ec) return self->Close();
               self->FinishRequest(self->request_keep_alive_);
             });
}

void HttpSession::DoResponseBody() {
  if (down_sr_->is_done()) return FinishRequest(request_keep_alive_);
  if (!res_parser_->is_done()) {
    auto& body = res_parser_->get().body();
    body.data = Buffer();
    body.size = body_capacity_;
    up_buffer_.reserve(kBodyBufferSize);
    http::async_read(*upstream_, up_buffer_, *res_parser_,
                     Timed(upstream_deadline_, config_.upstream.timeout,
                           [self = shared_from_this()](ec_t ec, size_t) {
                             self->OnResponseBodyRead(ec);
                           }));
    return;
  }
  EndUpstream(true);
  down_res_.body().data = nullptr;
  down_res_.body().size = 0;
  down_res_.body().more = false;
  WriteDownstream();
}

void HttpSession::OnResponseBodyRead(ec_t ec) {
  if (ec && ec == http::error::need_buffer) ec = {};
  if (ec) {
    // The head is already with the client: all we can do is cut the
    // connection so the client sees a truncated response, not a whole one.
    spdlog::warn("upstream failed mid-response for {}: {}", target_.path, ec.message());
    EndUpstream(false);
    record_.outcome = "upstream_error";
    return Close();
  }
  auto& body = res_parser_->get().body();
  size_t n = body_capacity_ - body.size;
  record_.bytes_out += n;
  if (res_parser_->is_done()) EndUpstream(true);
  down_res_.body().data = n ? body_buffer_.get() : nullptr;  // as in OnRequestBodyRead
  down_res_.body().size = n;
  down_res_.body().more = !res_parser_->is_done();
  WriteDownstream();
}

void HttpSession::OnResponseBodyWritten(ec_t ec) {
  if (ec && ec == http::error::need_buffer) ec = {};
  if (ec) {
    EndUpstream(false);
    return Close();
  }
  DoResponseBody();
}

// ---------------------------------------------------------------------------
// Endings.

void HttpSession::EndUpstream(bool reusable) {
  // The whole response was read: the exchange is over.
  const bool complete = reusable && res_parser_ && res_parser_->is_done();
  if (upstream_) {
    record_.upstream_ended = Clock::now();
    reusable = complete && res_parser_->keep_alive() && !response_framing_.close_delimited &&
               request_written_;
    // Bytes beyond the response's framing (more than its Content-Length, a
    // body after a 204, 304 or HEAD answer, data after the last chunk) would
    // be read as the next request's response: that connection is not reused.
    if (reusable && up_buffer_.size() > 0) {
      spdlog::warn("upstream sent {} bytes beyond its response to {} {}; closing that connection",
                   up_buffer_.size(), req_parser_->get().method_string(), target_.path);
      reusable = false;
    }
    if (reusable) {
      // The pool looks at the socket as well: bytes that came after the
      // last read close it there.
      if (worker_.pool.Release(std::move(upstream_)) == UpstreamPool::Unread::kBytes) {
        spdlog::warn("upstream sent bytes beyond its response to {} {}; closing that connection",
                     req_parser_->get().method_string(), target_.path);
      }
    } else {
      beast::error_code ignored;
      upstream_->socket().shutdown(tcp::socket::shutdown_both, ignored);
      upstream_->socket().close(ignored);
      upstream_.reset();
    }
  }
  if (!lease_.held()) return;
  // The backend is done with this write (or its connection is closed): the
  // key's next write may go. After a complete exchange a next write of this
  // thread goes now, on the connection just pooled, before this response
  // goes to its client: for a hot key the backend's next write then
  // overlaps that (KeyLease::HandOn). Every caller of EndUpstream(true)
  // goes on only to write this session's response, which the next write's
  // session does not touch. A failure hands on through the event loop.
  // A next write of another thread whose request is whole goes upstream from
  // here too, on one of this thread's connections (handoff.h).
  if (complete) return lease_.HandOn(&worker_.pool);
  lease_.Release();
}

bool HttpSession::Retryable() const {
  auto method = req_parser_->get().method();
  return intent_.kind != WriteIntent::Kind::kFence &&
         (method == http::verb::get || method == http::verb::head) && req_parser_->is_done() &&
         record_.bytes_in == 0;
}

void HttpSession::FailUpstream(ec_t ec, const char* stage) {
  // Closed by the sweep (the operation ends with operation_aborted), or a
  // timeout the kernel reported.
  bool timeout = upstream_timed_out_ || IsTimeout(ec);
  if (record_.upstream_ended < record_.upstream_started) record_.upstream_ended = Clock::now();
  EndUpstream(false);
  // A reused connection that failed may mean the backend restarted: drop
  // the other pooled connections it closed before they are handed out.
  if (upstream_reused_) worker_.pool.PruneDead();
  // A kept-alive connection the backend closed under us: an idempotent
  // request without a body is tried once more on a new connection. Fenced
  // writes never are: the backend may have applied them.
  if (upstream_reused_ && !retried_ && !timeout && !response_started_ && Retryable()) {
    spdlog::debug("upstream {} failed on a reused connection ({}); retrying {} once", stage,
                  ec.message(), target_.path);
    retried_ = true;
    return StartForward();
  }
  spdlog::warn("upstream {} failed for {} {}: {}", stage, req_parser_->get().method_string(),
               target_.path, ec.message());
  if (response_started_) return Close();
  // A body the client is still sending cannot be read as the next request.
  if (!req_parser_->is_done()) request_keep_alive_ = false;
  if (timeout) {
    return SendReply(MakeError(http::status::gateway_timeout, "upstream_timeout",
                               std::string("the upstream did not answer in time (") + stage + ")"),
                     "upstream_error");
  }
  SendReply(MakeError(http::status::bad_gateway, "upstream_error",
                      std::string("the upstream failed (") + stage + "): " + ec.message()),
            "upstream_error");
}

void HttpSession::EndRequest() {
  if (!in_request_) return;
  in_request_ = false;
  AccessLog();
  ctx_.requests_in_flight.fetch_sub(1, std::memory_order_relaxed);
}

void HttpSession::FinishRequest(bool keep_alive) {
  EndRequest();
  ++requests_served_;
  up_sr_.reset();
  res_parser_.reset();
  down_sr_.reset();
  reply_ = {};
  // An idle keep-alive connection holds no body-sized buffers: with many
  // idle clients that memory adds up (about 576 MiB for 10,000 of them).
  body_buffer_.reset();
  body_capacity_ = 0;
  up_buffer_.clear();
  up_buffer_.shrink_to_fit();
  // The wait for the next request reads into 4 KiB of buffer_ again at once
  // (DoWaitForRequest): keep that much rather than free and reallocate it.
  if (buffer_.capacity() > kWaitReadSize) buffer_.shrink_to_fit();
  if (head_.capacity() > kWaitReadSize) std::string().swap(head_);
  if (!keep_alive || ctx_.draining.load(std::memory_order_relaxed)) return CloseAfterResponse();
  // Only with the request read whole: no read of it can still be pending.
  if (Worker* home = affinity_.Due(); home != nullptr && req_parser_ && req_parser_->is_done()) {
    // The response went whole and nothing is pending on the client's
    // stream. Bytes the client already sent behind it (pipelined) go along.
    if (affinity_.Move(*home, stream_.socket(), buffer_, client_slot_, requests_served_,
                       client_ip_, intent_.key)) {
      return;  // this session ends here: its socket went with the move
    }
  }
  DoReadHeader();
}

void HttpSession::Resume(std::string_view pending, uint64_t requests_served) {
  affinity_.Arrived();
  requests_served_ = requests_served;
  if (!pending.empty()) {
    buffer_.commit(asio::buffer_copy(buffer_.prepare(pending.size()), asio::buffer(pending)));
  }
  Run();
}

void HttpSession::Sweep(Clock::time_point now) {
  beast::error_code ignored;
  // As Beast's own timeouts do: the socket is closed, the pending
  // operation ends with an error, and its handler ends the exchange.
  if (client_deadline_.Expire(now)) stream_.socket().close(ignored);
  if (upstream_deadline_.Expire(now) && upstream_) {
    upstream_timed_out_ = true;
    upstream_->socket().close(ignored);
  }
}

bool SweepSessions(Worker& worker, Deadline::Clock::time_point now) {
  // Sweep() only closes sockets: the handlers run later, so no session
  // leaves the set during this loop.
  for (HttpSession* session : worker.sessions) session->Sweep(now);
  return !worker.sessions.empty();
}

void HttpSession::Close() {
  EndUpstream(false);
  if (in_request_ && record_.outcome.empty()) record_.outcome = "client_error";
  EndRequest();
  beast::error_code ignored;
  stream_.socket().close(ignored);
}

void HttpSession::AccessLog() {
  if (!config_.log.access_log) return;
  std::string_view method;
  if (req_parser_) method = req_parser_->get().method_string();
  spdlog::get("access")->info(AccessLogLine(record_, request_id_, client_ip_, method, target_.path,
                                            intent_, Clock::now()));
}

}  // namespace fencegate::proxy
