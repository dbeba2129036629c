#include "locks/lock_session.h"

#include <spdlog/spdlog.h>

#include <boost/asio/post.hpp>

namespace fencegate::locks {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = proxy::http;
using tcp = asio::ip::tcp;
using proxy::MakeError;

LockSession::LockSession(tcp::socket&& socket, LockContext& context)
    : stream_(std::move(socket)), ctx_(context) {}

LockSession::~LockSession() { ctx_.sessions.erase(this); }

void LockSession::Run() {
  ctx_.sessions.insert(this);
  DoRead();
}

void LockSession::Close() {
  beast::error_code ignored;
  stream_.socket().close(ignored);
}

void LockSession::DoRead() {
  parser_.emplace();
  head_request_ = false;
  parser_->header_limit(static_cast<uint32_t>(ctx_.max_header_bytes));
  parser_->body_limit(kMaxLockBodyBytes);
  stream_.expires_after(ctx_.header_timeout);
  http::async_read(stream_, buffer_, *parser_,
                   [self = shared_from_this()](beast::error_code ec, size_t) { self->OnRead(ec); });
}

void LockSession::OnRead(beast::error_code ec) {
  if (ec == http::error::end_of_stream || ec == asio::error::eof) {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    return;
  }
  if (ec) {
    keep_alive_ = false;
    if (ec == beast::error::timeout || ec == asio::error::operation_aborted) return;
    return Send(MakeError(http::status::bad_request, "bad_request",
                          "malformed request: " + ec.message()));
  }
  keep_alive_ = parser_->get().keep_alive();
  head_request_ = parser_->get().method() == http::verb::head;
  // No deadline while an acquire waits: the wait is bounded by max_ttl.
  stream_.expires_never();
  Handle();
}

void LockSession::Handle() {
  proxy::Reply refusal;
  std::optional<LockCall> call = DecodeLockRequest(parser_->get(), ctx_.max_ttl, &refusal);
  if (!call) return Send(std::move(refusal));
  auto done = [self = shared_from_this(), name = call->name, op = call->op](const LockResult& r) {
    self->Send(LockReply(name, op, r));
  };
  switch (call->op) {
    case LockOp::kAcquire:
      return ctx_.service->Acquire(call->name, call->ttl, call->wait, done);
    case LockOp::kRenew:
      return ctx_.service->Renew(call->name, call->lease, done);
    case LockOp::kRelease:
      return ctx_.service->Release(call->name, call->lease, done);
  }
}

void LockSession::Send(proxy::Reply reply) {
  asio::post(stream_.get_executor(), [self = shared_from_this(), r = std::move(reply)]() mutable {
    r.keep_alive(self->keep_alive_);
    self->reply_ = std::move(r);
    self->stream_.expires_after(self->ctx_.header_timeout);
    proxy::AsyncWriteReply(self->stream_, self->reply_, self->serializer_, self->head_request_,
                           [self](beast::error_code ec, size_t) {
                             if (ec || !self->keep_alive_) {
                               beast::error_code ignored;
                               self->stream_.socket().shutdown(tcp::socket::shutdown_send,
                                                               ignored);
                               return;
                             }
                             self->DoRead();
                           });
  });
}

}  // namespace fencegate::locks
