#include "proxy/upstream_exchange.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/write.hpp>

#include "proxy/http_session.h"
#include "net/read_attempt.h"
#include "proxy/relay_io.h"
#include "net/write_whole.h"

// UpstreamExchange, first half: the connection, the request, the endings
// and the retry (upstream_exchange.h). The response is relayed in
// response_relay.cc.
//
// Every handler holds the session (`self`, shared_from_this()), which owns
// this exchange as `exchange_`: one shared_ptr per operation, as for the
// session's own handlers, and no pointer to the exchange besides.

namespace fencegate::proxy {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;

char* BodyBuffer::Get(uint64_t want) {
  // Sized to the body when its length is known (a 16-byte PUT does not need
  // 64 KiB).
  size_t size = static_cast<size_t>(std::clamp<uint64_t>(want, 1, kMaxSize));
  if (capacity_ < size) {
    data_ = std::make_unique_for_overwrite<char[]>(size);
    capacity_ = size;
  }
  return data_.get();
}

void UpstreamExchange::FreeBuffers() {
  up_sr_.reset();
  res_parser_.reset();
  down_sr_.reset();
  body_.Free();
  up_buffer_.clear();
  up_buffer_.shrink_to_fit();
  if (head_.capacity() > kKeptHeadCapacity) std::string().swap(head_);
}

// ---------------------------------------------------------------------------
// The request: connection, head and body.

bool UpstreamExchange::PrepareWholeRequest(ec_t& ec) {
  auto& parser = *session_.req_parser_;
  // 100-continue: the client may wait for our go-ahead (OnUpstream);
  // chunked: the head says chunked, and the body would have to be framed again.
  if (ExpectsContinue(parser.get().base()) || parser.chunked()) return false;
  size_t n = 0;
  if (!parser.is_done()) {
    auto remaining = parser.content_length_remaining();
    if (!remaining || *remaining > kWholeBodyMax || *remaining > session_.buffer_.size()) {
      return false;
    }
    auto& body = parser.get().body();
    body.data = body_.Get(*remaining);
    body.size = body_.capacity();
    ParseBuffered(parser, session_.buffer_, kMessageDone, ec);
    // Not done cannot be: the body was all in the buffer, and its buffer fits it.
    if (!ec && !parser.is_done()) ec = http::error::partial_message;
    if (ec) {
      OnRequestBodyRead(ec);
      return false;
    }
    n = body_.capacity() - body.size;
    session_.record_.bytes_in += n;
    session_.idem_.OnRequestBody(body_.data(), n);
  }
  head_.clear();
  AppendUpstreamHead(parser, session_.target_, *config_, session_.client_ip_, session_.request_id_,
                     &head_, session_.Destination());
  if (n > 0) head_.append(body_.data(), n);
  whole_request_ = true;
  return true;
}

void UpstreamExchange::ContinueHanded(HandedConnection handed) {
  session_.record_.outcome = "forwarded";
  session_.record_.upstream_started = handed.sent_at;
  upstream_timed_out_ = false;
  const size_t sent = handed.sent;
  ec_t ec;
  request_started_ = true;  // another thread sent it, wholly or in part
  upstream_ = worker_.pool.Adopt(std::move(handed), ec);
  // The request may have gone whole: no second try (never for a fenced write).
  if (!upstream_) return FailUpstream(ec, "take over connection");
  upstream_reused_ = true;
  up_buffer_.clear();
  expect_continue_ = false;
  request_written_ = false;
  spdlog::debug("key {}: request {} sent upstream by the thread that handed the key on ({} of {} "
                "bytes)",
                session_.intent_.key, session_.request_id_, sent, head_.size());
  if (sent < head_.size()) return WriteUpstreamHead(sent);
  request_written_ = true;
  DoReadResponseHeader();
}

void UpstreamExchange::StartForward() {
  session_.record_.outcome = "forwarded";
  session_.record_.upstream_started = Clock::now();
  upstream_timed_out_ = false;
  // A retry always takes a new connection: the pooled one just failed.
  worker_.pool.Acquire(
      [self = session_.shared_from_this()](ec_t ec, UpstreamPool::Connection c, bool reused) {
        self->exchange_.OnUpstream(ec, std::move(c), reused);
      },
      /*fresh=*/retried_, /*probe=*/!Retryable());
}

void UpstreamExchange::OnUpstream(ec_t ec, UpstreamPool::Connection connection, bool reused) {
  if (ec) return FailUpstream(ec, "connect");
  if (owner_ != 0 && !session_.ctx_.fence->Forwardable(owner_)) {
    // The key's ownership lapsed while a connection was found: the write
    // does not go (the connection, unused, goes back to the pool).
    worker_.pool.Release(std::move(connection));
    lease_.Release();
    session_.idem_.Release();
    return session_.SendReply(MakeOwnershipLapsed(session_.intent_.key), "expired");
  }
  upstream_ = std::move(connection);
  upstream_reused_ = reused;
  up_buffer_.clear();

  auto& parser = *session_.req_parser_;
  expect_continue_ = ExpectsContinue(parser.get().base()) && !parser.is_done();
  request_written_ = false;
  if (whole_request_) return WriteUpstreamHead();  // built by PrepareWholeRequest
  if (parser.is_done() && !expect_continue_) {
    // No body (the head alone completed the request): one write of the
    // head, appended straight from the parsed request (up_req_ is not used).
    head_.clear();
    AppendUpstreamHead(parser, session_.target_, *config_, session_.client_ip_,
                       session_.request_id_, &head_, session_.Destination());
    // A chunked body complete already is an empty one read by an earlier
    // try (a retry: Retryable() wants no body bytes): its head says chunked,
    // so the last chunk must follow, or the backend waits for it.
    if (parser.chunked()) head_.append("0\r\n\r\n");
    return WriteUpstreamHead();
  }
  BuildUpstreamRequest(parser, session_.target_, *config_, session_.client_ip_,
                       session_.request_id_, &up_req_, session_.Destination());
  up_req_.body().data = nullptr;
  up_req_.body().size = 0;
  up_req_.body().more = !parser.is_done();
  up_sr_.emplace(up_req_);
  if (!expect_continue_) {
    // The head goes out with the first piece of the body (or alone when
    // there is none): one write, not two, for a small request.
    return DoRequestBody();
  }
  request_started_ = true;
  http::async_write_header(*upstream_, *up_sr_,
                           Timed(upstream_deadline_, config_->upstream.timeout,
                                 [self = session_.shared_from_this()](ec_t ec, size_t) {
                                   self->exchange_.OnUpstreamHeaderWritten(ec);
                                 }));
}

void UpstreamExchange::OnUpstreamHeaderWritten(ec_t ec) {
  if (ec) return FailUpstream(ec, "write request head");
  if (expect_continue_) {
    // The client waits for our go-ahead before it sends the body.
    expect_continue_ = false;
    static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    return asio::async_write(session_.stream_, asio::buffer(kContinue.data(), kContinue.size()),
                             Timed(session_.client_deadline_, config_->limits.idle_timeout,
                                   [self = session_.shared_from_this()](ec_t ec, size_t) {
                                     if (ec) return self->exchange_.FailUpstream(ec, "client gone");
                                     self->exchange_.DoRequestBody();
                                   }));
  }
  DoRequestBody();
}

void UpstreamExchange::WriteUpstreamHead(size_t from) {
  request_started_ = true;
  WriteWhole(*upstream_, {asio::buffer(head_) + from, asio::const_buffer()}, upstream_deadline_,
             config_->upstream.timeout,
             [self = session_.shared_from_this()](ec_t ec, bool at_once) {
               UpstreamExchange& x = self->exchange_;
               if (ec) return x.FailUpstream(ec, "write request head");
               x.request_written_ = true;
               // Written in this handler: the response cannot have raised
               // an event the loop has seen, so the read need not try recv
               // before it waits (read_attempt.h). Not through TLS, whose
               // reads go through OpenSSL's own buffer.
               if (at_once && !x.upstream_->tls() && x.up_buffer_.size() == 0) {
                 SkipNextReadAttempt(x.upstream_->socket());
               }
               x.DoReadResponseHeader();
             });
}

void UpstreamExchange::DoRequestBody() {
  if (up_sr_->is_done()) {
    request_written_ = true;
    return DoReadResponseHeader();
  }
  auto& parser = *session_.req_parser_;
  if (!parser.is_done()) {
    auto& buffer = session_.buffer_;
    auto remaining = parser.content_length_remaining();
    uint64_t want = remaining ? *remaining : BodyBuffer::kMaxSize;
    auto& body = parser.get().body();
    body.data = body_.Get(want);
    body.size = body_.capacity();
    // Beast sizes each read by the buffer's spare capacity: make it large so
    // a body moves in 64 KiB reads, not in the few hundred bytes left over
    // from the head. Not needed when the whole body came with the head.
    if (want > buffer.size()) {
      buffer.reserve(buffer.size() + std::min<uint64_t>(want - buffer.size(), BodyBuffer::kMaxSize));
    }
    ec_t ec;
    if (ParseBuffered(parser, buffer, kMessageDone, ec)) return OnRequestBodyRead(ec);
    // One read at a time, each under idle_timeout: a body that keeps
    // arriving, however slowly, is never cut.
    http::async_read_some(session_.stream_, buffer, parser,
                     Timed(session_.client_deadline_, config_->limits.idle_timeout,
                           [self = session_.shared_from_this()](ec_t ec, size_t) {
                             self->exchange_.OnRequestBodyRead(ec);
                           }));
    return;
  }
  up_req_.body().data = nullptr;
  up_req_.body().size = 0;
  up_req_.body().more = false;
  WriteUpstream();
}

void UpstreamExchange::OnRequestBodyRead(ec_t ec) {
  if (ec && ec == http::error::need_buffer) ec = {};
  if (ec && ec == http::error::body_limit) {
    // Counted as it streamed: the upstream got a partial body; drop that
    // connection so the partial request can never complete.
    EndUpstream(false);
    session_.idem_.Release();
    session_.request_keep_alive_ = false;
    return session_.SendReply(
        MakeError(http::status::payload_too_large, "body_too_large",
                  "the request body is larger than limits.max_body_bytes (" +
                      std::to_string(config_->limits.max_body_bytes) + ")"),
        "bad_request");
  }
  if (ec) {
    // The client went away or sent a broken body: abandon the exchange.
    spdlog::debug("client body read failed: {}", ec.message());
    EndUpstream(false);
    session_.idem_.Release();  // a partial request cannot run
    session_.record_.outcome = "client_error";
    return session_.Close();
  }
  auto& body = session_.req_parser_->get().body();
  size_t n = body_.capacity() - body.size;
  session_.record_.bytes_in += n;
  session_.idem_.OnRequestBody(body_.data(), n);
  // No new bytes (the read only completed the message, e.g. an empty
  // chunked body): hand the serializer no buffer, or it writes a zero-size
  // chunk, which is a last-chunk, before the real last-chunk.
  up_req_.body().data = n ? body_.data() : nullptr;
  up_req_.body().size = n;
  up_req_.body().more = !session_.req_parser_->is_done();
  WriteUpstream();
}

void UpstreamExchange::WriteUpstream() {
  request_started_ = true;
  ec_t ec;
  if (TryWriteNow(upstream_->socket(), *up_sr_, ec)) return OnRequestBodyWritten(ec);
  http::async_write(*upstream_, *up_sr_,
                    Timed(upstream_deadline_, config_->upstream.timeout,
                          [self = session_.shared_from_this()](ec_t ec, size_t) {
                            self->exchange_.OnRequestBodyWritten(ec);
                          }));
}

void UpstreamExchange::OnRequestBodyWritten(ec_t ec) {
  if (ec && ec == http::error::need_buffer) ec = {};
  if (ec) return FailUpstream(ec, "write request body");
  DoRequestBody();
}

// ---------------------------------------------------------------------------
// Endings.

void UpstreamExchange::EndUpstream(bool reusable) {
  // The whole response was read: the exchange is over.
  const bool complete = reusable && res_parser_ && res_parser_->is_done();
  // An idempotent request's response was read whole: its record is
  // finished now, before the response goes to the client.
  if (complete) session_.idem_.OnResponseComplete();
  if (upstream_) {
    session_.record_.upstream_ended = Clock::now();
    reusable = complete && res_parser_->keep_alive() && !response_framing_.close_delimited &&
               request_written_;
    // Bytes beyond the response's framing (more than its Content-Length, a
    // body after a 204, 304 or HEAD answer, data after the last chunk) would
    // be read as the next request's response: that connection is not reused.
    if (reusable && up_buffer_.size() > 0) {
      spdlog::warn("upstream sent {} bytes beyond its response to {} {}; closing that connection",
                   up_buffer_.size(), session_.req_parser_->get().method_string(),
                   session_.target_.path);
      reusable = false;
    }
    if (reusable) {
      // The pool looks at the socket as well: bytes that came after the
      // last read close it there.
      if (worker_.pool.Release(std::move(upstream_)) == UpstreamPool::Unread::kBytes) {
        spdlog::warn("upstream sent bytes beyond its response to {} {}; closing that connection",
                     session_.req_parser_->get().method_string(), session_.target_.path);
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

bool UpstreamExchange::Retryable() const {
  const auto& parser = *session_.req_parser_;
  auto method = parser.get().method();
  return session_.intent_.kind != WriteIntent::Kind::kFence &&
         (method == http::verb::get || method == http::verb::head) && parser.is_done() &&
         session_.record_.bytes_in == 0;
}

void UpstreamExchange::FailUpstream(ec_t ec, const char* stage) {
  // Closed by the sweep (the operation ends with operation_aborted), or a
  // timeout the kernel reported.
  bool timeout = upstream_timed_out_ || IsTimeout(ec);
  auto& record = session_.record_;
  if (record.upstream_ended < record.upstream_started) record.upstream_ended = Clock::now();
  EndUpstream(false);
  // Nothing went upstream: the request did not run.
  if (!request_started_) session_.idem_.Release();
  // A reused connection that failed may mean the backend restarted: drop
  // the other pooled connections it closed before they are handed out.
  if (upstream_reused_) worker_.pool.PruneDead();
  // A kept-alive connection the backend closed under us: an idempotent
  // request without a body is tried once more on a new connection. Fenced
  // writes never are: the backend may have applied them.
  if (upstream_reused_ && !retried_ && !timeout && !response_started_ && Retryable()) {
    spdlog::debug("upstream {} failed on a reused connection ({}); retrying {} once", stage,
                  ec.message(), session_.target_.path);
    retried_ = true;
    return StartForward();
  }
  spdlog::warn("upstream {} failed for {} {}: {}", stage,
               session_.req_parser_->get().method_string(), session_.target_.path, ec.message());
  if (response_started_) return session_.Close();
  // A body the client is still sending cannot be read as the next request.
  if (!session_.req_parser_->is_done()) session_.request_keep_alive_ = false;
  if (timeout) {
    return session_.SendReply(
        MakeError(http::status::gateway_timeout, "upstream_timeout",
                  std::string("the upstream did not answer in time (") + stage + ")"),
        "upstream_error");
  }
  session_.SendReply(MakeError(http::status::bad_gateway, "upstream_error",
                               std::string("the upstream failed (") + stage + "): " + ec.message()),
                     "upstream_error");
}

void UpstreamExchange::Sweep(Clock::time_point now) {
  if (upstream_deadline_.Expire(now) && upstream_) {
    upstream_timed_out_ = true;
    beast::error_code ignored;
    upstream_->socket().close(ignored);
  }
}

}  // namespace fencegate::proxy
