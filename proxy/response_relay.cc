// UpstreamExchange, second half: the response, from its head on the upstream
// connection to its last byte on the client's (upstream_exchange.h). The
// request half, the endings and the retry are in upstream_exchange.cc.

#include <spdlog/spdlog.h>

#include <algorithm>

#include "proxy/http_session.h"
#include "proxy/relay_io.h"
#include "proxy/upstream_exchange.h"
#include "net/write_whole.h"

namespace fencegate::proxy {

namespace asio = boost::asio;

void UpstreamExchange::DoReadResponseHeader() {
  res_parser_.emplace();
  res_parser_->header_limit(static_cast<uint32_t>(
      std::max<uint64_t>(config_->limits.max_header_bytes, uint64_t{64} * 1024)));
  res_parser_->body_limit(boost::none);
  if (session_.req_parser_->get().method() == http::verb::head) res_parser_->skip(true);
  http::async_read_header(*upstream_, up_buffer_, *res_parser_,
                          Timed(upstream_deadline_, config_->upstream.timeout,
                                [self = session_.shared_from_this()](ec_t ec, size_t) {
                                  self->exchange_.OnResponseHeader(ec);
                                }));
}

void UpstreamExchange::OnResponseHeader(ec_t ec) {
  if (ec) return FailUpstream(ec, "read response head");
  auto& res = res_parser_->get();
  unsigned status = res.result_int();
  if (status / 100 == 1) {
    if (status == 101) return FailUpstream(http::error::bad_version, "upgrade not supported");
    return DoReadResponseHeader();  // interim response: wait for the final one
  }
  // Only the framing now; the head is built in WriteResponse, as text when
  // the response goes whole, else as down_res_ for the serializer.
  const auto& req = session_.req_parser_->get();
  response_framing_ = DecideDownstreamFraming(
      *res_parser_, req.method() == http::verb::head, req.version() >= 11,
      session_.request_keep_alive_ && !session_.ctx_.draining.load(std::memory_order_relaxed));
  session_.request_keep_alive_ = response_framing_.keep_alive;
  session_.record_.status = status;
  session_.idem_.OnResponseHead();
  whole_body_size_ = 0;
  if (!res_parser_->is_done()) {
    // A small body of known length is read whole first, so that head and
    // body go to the client in one write; a larger or open-ended one is
    // streamed behind the head.
    if (auto length = res_parser_->content_length_remaining();
        length && *length <= BodyBuffer::kMaxSize) {
      return DoWholeResponseBody(*length);
    }
  }
  WriteResponse();
}

void UpstreamExchange::DoWholeResponseBody(uint64_t length) {
  auto& body = res_parser_->get().body();
  body.data = body_.Get(length);
  body.size = body_.capacity();
  if (length > up_buffer_.size()) up_buffer_.reserve(up_buffer_.size() + length);
  ec_t ec;
  if (ParseBuffered(*res_parser_, up_buffer_, kMessageDone, ec)) return OnWholeResponseBody(ec);
  ReadMoreResponseBody();
}

void UpstreamExchange::ReadMoreResponseBody() {
  // One read at a time, each under upstream.timeout: a backend that sends
  // a small body in slow pieces is timed per piece, as a large one is.
  http::async_read_some(*upstream_, up_buffer_, *res_parser_,
                        Timed(upstream_deadline_, config_->upstream.timeout,
                              [self = session_.shared_from_this()](ec_t ec, size_t) {
                                self->exchange_.OnWholeResponseBody(ec);
                              }));
}

void UpstreamExchange::OnWholeResponseBody(ec_t ec) {
  if (ec && ec == http::error::need_buffer) ec = {};
  if (!ec && !res_parser_->is_done()) return ReadMoreResponseBody();
  // Nothing went to the client yet: a failure here is answered 502/504 (and
  // a GET/HEAD on a reused connection is retried), like a failed head.
  if (ec) return FailUpstream(ec, "read response body");
  whole_body_size_ = body_.capacity() - res_parser_->get().body().size;
  session_.record_.bytes_out += whole_body_size_;
  session_.idem_.OnResponseBody(body_.data(), whole_body_size_);
  WriteResponse();
}

void UpstreamExchange::WriteResponse() {
  // The head, with whatever body is in hand (whole_body_size_ bytes); the
  // rest (if any) follows from DoResponseBody. The session's
  // request_keep_alive_ already holds what the framing allows, so the
  // head's Connection says the same.
  if (res_parser_->is_done()) EndUpstream(true);
  // An idempotent request's record is stored (OnResponseComplete) before
  // its response goes.
  if (session_.idem_.pending() &&
      session_.idem_.Hold([self = session_.shared_from_this()] { self->exchange_.WriteResponse(); })) {
    return;
  }
  const auto& req = session_.req_parser_->get();
  const bool head_request = req.method() == http::verb::head;
  const bool client_http11 = req.version() >= 11;
  if (res_parser_->is_done() && !response_framing_.chunked) {
    // All of it is in hand and goes as is: head and body in one write, the
    // head appended straight from the parsed response (down_res_ is not used).
    head_.clear();
    AppendDownstreamHead(*res_parser_, head_request, client_http11, session_.request_keep_alive_,
                         session_.request_id_, &head_);
    response_started_ = true;
    return WriteWholeResponse();
  }
  BuildDownstreamResponse(*res_parser_, head_request, client_http11, session_.request_keep_alive_,
                          &down_res_);
  down_res_.set("X-Request-Id", session_.request_id_);
  // No bytes in hand: no buffer for the serializer (as in OnRequestBodyRead).
  down_res_.body().data = whole_body_size_ ? body_.data() : nullptr;
  down_res_.body().size = whole_body_size_;
  down_res_.body().more = !res_parser_->is_done();
  down_sr_.emplace(down_res_);
  response_started_ = true;
  WriteDownstream();
}

void UpstreamExchange::WriteWholeResponse() {
  session_.CountEnded();  // before the answer's last bytes go (CountEnded)
  WriteWhole(session_.stream_,
             {asio::buffer(head_), asio::const_buffer(body_.data(), whole_body_size_)},
             session_.client_deadline_, config_->limits.idle_timeout,
             [self = session_.shared_from_this()](ec_t ec, bool) {
               if (ec) return self->Close();
               self->FinishRequest(self->request_keep_alive_);
             });
}

void UpstreamExchange::WriteDownstream() {
  if (!down_res_.body().more) session_.CountEnded();  // the last piece goes now
  ec_t ec;
  if (TryWriteNow(session_.stream_.socket(), *down_sr_, ec)) return OnResponseBodyWritten(ec);
  http::async_write(session_.stream_, *down_sr_,
                    Timed(session_.client_deadline_, config_->limits.idle_timeout,
                          [self = session_.shared_from_this()](ec_t ec, size_t) {
                            self->exchange_.OnResponseBodyWritten(ec);
                          }));
}

void UpstreamExchange::DoResponseBody() {
  if (down_sr_->is_done()) return session_.FinishRequest(session_.request_keep_alive_);
  if (!res_parser_->is_done()) {
    auto& body = res_parser_->get().body();
    body.data = body_.Get();
    body.size = body_.capacity();
    up_buffer_.reserve(BodyBuffer::kMaxSize);
    // One read at a time, each under upstream.timeout (per piece).
    http::async_read_some(*upstream_, up_buffer_, *res_parser_,
                     Timed(upstream_deadline_, config_->upstream.timeout,
                           [self = session_.shared_from_this()](ec_t ec, size_t) {
                             self->exchange_.OnResponseBodyRead(ec);
                           }));
    return;
  }
  EndUpstream(true);
  down_res_.body().data = nullptr;
  down_res_.body().size = 0;
  down_res_.body().more = false;
  if (session_.idem_.pending() &&
      session_.idem_.Hold([self = session_.shared_from_this()] { self->exchange_.WriteDownstream(); })) {
    return;
  }
  WriteDownstream();
}

void UpstreamExchange::OnResponseBodyRead(ec_t ec) {
  if (ec && ec == http::error::need_buffer) ec = {};
  if (ec) {
    // The head is already with the client: all we can do is cut the
    // connection so the client sees a truncated response, not a whole one.
    spdlog::warn("upstream failed mid-response for {}: {}", session_.target_.path, ec.message());
    EndUpstream(false);
    session_.record_.outcome = "upstream_error";
    return session_.Close();
  }
  auto& body = res_parser_->get().body();
  size_t n = body_.capacity() - body.size;
  session_.record_.bytes_out += n;
  session_.idem_.OnResponseBody(body_.data(), n);
  if (res_parser_->is_done()) EndUpstream(true);
  down_res_.body().data = n ? body_.data() : nullptr;  // as in OnRequestBodyRead
  down_res_.body().size = n;
  down_res_.body().more = !res_parser_->is_done();
  // The last piece waits for the record, as in WriteResponse.
  if (session_.idem_.pending() &&
      session_.idem_.Hold([self = session_.shared_from_this()] { self->exchange_.WriteDownstream(); })) {
    return;
  }
  WriteDownstream();
}

void UpstreamExchange::OnResponseBodyWritten(ec_t ec) {
  if (ec && ec == http::error::need_buffer) ec = {};
  if (ec) {
    EndUpstream(false);
    return session_.Close();
  }
  DoResponseBody();
}

}  // namespace fencegate::proxy
