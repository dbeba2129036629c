#include "proxy/http_session.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "net/head_limit.h"
#include "proxy/headers.h"
#include "fence/request_checks.h"
#include "net/read_attempt.h"
#include "net/write_whole.h"
#include "proxy/refusal_log.h"

namespace fencegate::proxy {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;

HttpSession::HttpSession(Listener::Socket&& socket, ProxyContext& context, Worker& worker)
    : stream_(UpstreamPool::Tcp(std::move(socket)), context.listener_tls.get()),
      ctx_(context),
      worker_(worker),
      snapshot_(context.live.Get()),
      config_(snapshot_->config.get()),
      exchange_(*this, worker, *config_),
      idem_(*this),
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
        Timed(client_deadline_, config_->limits.header_timeout,
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
            std::min<std::chrono::milliseconds>(config_->limits.header_timeout,
                                                kTlsShutdownTimeout),
            [self = shared_from_this()](ec_t) { self->Close(); }));
}

void HttpSession::Drain() {
  if (idle_) Close();
}

// ---------------------------------------------------------------------------
// Request head and the decision.

void HttpSession::TakeSnapshot() {
  std::shared_ptr<const ConfigSnapshot> now = ctx_.live.Get();
  if (now == snapshot_) return;
  snapshot_ = std::move(now);
  config_ = snapshot_->config.get();
  exchange_.SetConfig(*config_);
}

void HttpSession::DoReadHeader() {
  if (ctx_.draining.load(std::memory_order_relaxed) && buffer_.size() == 0) return Close();
  intent_ = WriteIntent{};
  target_.path.clear();  // a head refused before it is parsed has no path
  request_id_.clear();
  record_.Reset();
  exchange_.Reset();
  idem_.Reset();
  // The previous request has ended: nothing refers to its snapshot now.
  TakeSnapshot();
  req_parser_.emplace();
  head_bytes_ = 0;  // PutHead sets the parser's header_limit
  req_parser_->body_limit(config_->limits.max_body_bytes);
  idle_ = buffer_.size() == 0;
  // A new connection must deliver its first head within header_timeout; a
  // kept-alive one may stay silent for idle_timeout, and then the head that
  // follows has header_timeout from its first byte.
  if (idle_ && requests_served_ > 0) return DoWaitForRequest();
  StartHeaderRead();
}

void HttpSession::DoWaitForRequest() {
  stream_.async_read_some(buffer_.prepare(kWaitReadSize),
                          Timed(client_deadline_, config_->limits.idle_timeout,
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
  if (PutHead(*req_parser_, buffer_, config_->limits.max_header_bytes, &head_bytes_, ec)) {
    client_deadline_.Disarm();
    return OnReadHeader(ec);
  }
  // One deadline for the whole head, armed at its first read.
  if (!client_deadline_.armed()) client_deadline_.Arm(config_->limits.header_timeout);
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
  // A reload while the connection waited for this head applies to it: the
  // head was read under the limits of before, the request runs under the
  // configuration of now.
  TakeSnapshot();
  // `ec &&` first, here and below: a comparison with an error enum costs a
  // category lookup, and most reads succeed.
  if (ec && (ec == http::error::end_of_stream || ec == asio::error::eof ||
             ec == asio::error::operation_aborted || ec == asio::error::connection_reset)) {
    return Close();
  }
  if (IsTimeout(ec)) return Close();
  in_request_ = true;
  counted_ = false;
  ctx_.requests_in_flight.fetch_add(1, std::memory_order_relaxed);
  request_keep_alive_ = false;
  if (ec && ec == http::error::header_limit) {
    return SendReply(MakeError(http::status::request_header_fields_too_large, "headers_too_large",
                               "the request head is larger than limits.max_header_bytes (" +
                                   std::to_string(config_->limits.max_header_bytes) + ")"),
                     "bad_request");
  }
  if (ec && ec == http::error::body_limit) {
    return SendReply(MakeError(http::status::payload_too_large, "body_too_large",
                               "the request body is larger than limits.max_body_bytes (" +
                                   std::to_string(config_->limits.max_body_bytes) + ")"),
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
  Classify(snapshot_->fence_settings, *snapshot_->router, req.method_string(), target_.path,
           req.base(), &intent_);
  if (!intent_.shadow_violation.empty()) {
    ctx_.fence->CountShadowViolation();
    spdlog::warn("shadow: would have refused {} {} ({}), forwarding", req.method_string(),
                 target_.path, intent_.shadow_violation);
  }
  if (intent_.kind == WriteIntent::Kind::kReject) {
    return SendReply(std::move(*intent_.reply), intent_.outcome);
  }
  if (intent_.idempotency.on()) return idem_.Begin();
  Proceed();
}

void HttpSession::Proceed() {
  if (intent_.kind == WriteIntent::Kind::kPassThrough) {
    if (!req_parser_->is_done()) {
      // A small body that came with its head goes out with it in one
      // write, as a fenced write's does; a larger one streams.
      ec_t body_ec;
      exchange_.PrepareWholeRequest(body_ec);
      if (body_ec) return;  // answered
    }
    return exchange_.StartForward();
  }
  ec_t body_ec;
  bool whole = exchange_.PrepareWholeRequest(body_ec);
  if (body_ec) return;  // answered
  ctx_.fence->Check(
      intent_, stream_.get_executor(),
      [self = shared_from_this()](FenceVerdict v) { self->OnVerdict(std::move(v)); },
      whole ? exchange_.whole_request() : std::string_view{});
}

void HttpSession::OnVerdict(FenceVerdict verdict) {
  if (!verdict.shadow_violation.empty()) {
    intent_.shadow_violation = verdict.shadow_violation;
    spdlog::warn("shadow: would have refused {} key={} token={} ({}, current {}), forwarding",
                 req_parser_->get().method_string(), intent_.key, intent_.token,
                 verdict.shadow_violation, verdict.current);
  }
  if (!verdict.forward) {
    idem_.Release();  // refused: the request did not run
    return SendReply(std::move(*verdict.reply), verdict.outcome);
  }
  affinity_.NoteTurn(verdict.lease, intent_.key);
  exchange_.Hold(std::move(verdict.lease), verdict.owner);
  if (verdict.handed) return exchange_.ContinueHanded(std::move(*verdict.handed));
  exchange_.StartForward();
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
  if (record_.status >= 400) LogRefusal(reply);
  // Unread body bytes would be taken for the next request: close instead.
  bool keep_alive = request_keep_alive_ && req_parser_ && req_parser_->is_done() &&
                    !ctx_.draining.load(std::memory_order_relaxed);
  reply.version(req_parser_ && req_parser_->get().version() == 10 ? 10 : 11);
  reply.keep_alive(keep_alive);
  if (!request_id_.empty()) reply.set("X-Request-Id", request_id_);
  reply_ = std::move(reply);
  record_.bytes_out += reply_.body().size();
  CountEnded();
  http::async_write(stream_, reply_,
                    Timed(client_deadline_, config_->limits.idle_timeout,
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
  BodyBuffer& buffer = exchange_.body();
  body.data = buffer.Get();
  body.size = buffer.capacity();
  http::async_read(
      stream_, buffer_, *req_parser_,
      Timed(client_deadline_, config_->limits.idle_timeout,
            [self = shared_from_this()](ec_t ec, size_t) {
              if (ec && ec == http::error::need_buffer) ec = {};
              if (ec) {
                self->request_keep_alive_ = false;  // broken or oversized body: answer, then close
                return self->SendReply(std::move(self->reply_), self->pending_outcome_);
              }
              self->discarded_ +=
                  self->exchange_.body().capacity() - self->req_parser_->get().body().size;
              self->DoDiscardBody();
            }));
}

// ---------------------------------------------------------------------------
// Endings.

void HttpSession::EndRequest() {
  if (!in_request_) return;
  CountEnded();
  in_request_ = false;
  AccessLog(Clock::now());
}

void HttpSession::CountEnded() {
  if (!in_request_ || counted_) return;
  counted_ = true;
  // Out of flight before it is counted as ended: a scrape that sees it
  // ended does not see it in flight too.
  ctx_.requests_in_flight.fetch_sub(1, std::memory_order_relaxed);
  CountRequest(Clock::now());
}

void HttpSession::CountRequest(Clock::time_point now) {
  std::optional<metrics::Outcome> outcome = metrics::OutcomeOf(record_.outcome);
  if (!outcome) return;  // every outcome the session sets has a name there (request_metrics.h)
  // The route's slot: the router keeps the config's routes, in order, and
  // the snapshot the slot of each (metrics::RouteSlots).
  size_t slot = 0;
  if (intent_.route != nullptr && snapshot_ != nullptr) {
    const auto index = static_cast<size_t>(intent_.route - snapshot_->router->routes().data());
    if (index < snapshot_->metric_slots.size()) slot = snapshot_->metric_slots[index];
    if (slot >= worker_.metrics.route_slots()) slot = 0;
  }
  std::optional<Clock::duration> upstream;
  if (record_.upstream_started != Clock::time_point{} &&
      record_.upstream_ended >= record_.upstream_started) {
    upstream = record_.upstream_ended - record_.upstream_started;
  }
  worker_.metrics.Count(slot, *outcome, !intent_.shadow_violation.empty(), now - record_.started,
                        upstream);
}

void HttpSession::FinishRequest(bool keep_alive) {
  // An idempotency record is being settled: this request ends (and the
  // next one is read) once it is, so that a repeat behind it sees it.
  if (idem_.HoldFinish(keep_alive)) return;
  EndRequest();
  ++requests_served_;
  reply_ = {};
  // An idle keep-alive connection holds no body-sized buffers: with many
  // idle clients that memory adds up (about 576 MiB for 10,000 of them).
  exchange_.FreeBuffers();
  // The wait for the next request reads into 4 KiB of buffer_ again at once
  // (DoWaitForRequest): keep that much rather than free and reallocate it.
  if (buffer_.capacity() > kWaitReadSize) buffer_.shrink_to_fit();
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
  exchange_.Sweep(now);
}

bool SweepSessions(Worker& worker, Deadline::Clock::time_point now) {
  // Sweep() only closes sockets: the handlers run later, so no session
  // leaves the set during this loop.
  for (HttpSession* session : worker.sessions) session->Sweep(now);
  return !worker.sessions.empty();
}

void HttpSession::Close() {
  idem_.Cancel();
  // A reserved request that never went upstream did not run.
  if (idem_.running() && !exchange_.request_started()) idem_.Release();
  exchange_.EndUpstream(false);
  if (in_request_ && record_.outcome.empty()) record_.outcome = "client_error";
  EndRequest();
  beast::error_code ignored;
  stream_.socket().close(ignored);
}

void HttpSession::AccessLog(Clock::time_point now) {
  if (!config_->log.access_log) return;
  std::string_view method;
  if (req_parser_) method = req_parser_->get().method_string();
  spdlog::get("access")->info(AccessLogLine(record_, request_id_, client_ip_, method, target_.path,
                                            intent_, now, std::chrono::system_clock::now()));
}

void HttpSession::LogRefusal(const Reply& reply) {
  if (!spdlog::should_log(spdlog::level::info)) return;
  uint64_t held_back = 0;
  const int64_t second =
      std::chrono::duration_cast<std::chrono::seconds>(Clock::now().time_since_epoch()).count();
  if (!ctx_.refusals.Admit(second, &held_back)) return;
  if (held_back > 0) {
    spdlog::info("{} more refused request(s) were not logged (at most {} lines a second)",
                 held_back, kRefusalLinesPerSecond);
  }
  const std::string error = ErrorCodeOf(reply.body());
  Refusal refusal;
  refusal.status = reply.result_int();
  refusal.error = error;
  refusal.request_id = request_id_.empty() ? std::string_view("-") : request_id_;
  refusal.client = client_ip_;
  if (req_parser_ && req_parser_->is_header_done()) {
    refusal.method = req_parser_->get().method_string();
  }
  refusal.path = target_.path;
  spdlog::info(RefusalLine(refusal, intent_));
}

}  // namespace fencegate::proxy
