#pragma once
// MaybeTlsStream: one connection, plain TCP or TLS over TCP, chosen when it
// is made. It is an Asio AsyncReadStream and AsyncWriteStream, so sessions
// read and write HTTP through it without knowing which. Timeouts stay those
// of the TCP layer (expires_after), which bound the TLS records and the
// handshake as well.
//
// The TLS branch takes the handler type-erased (ErasedIoHandler: one heap
// allocation per TLS read or write) and one buffer type (FirstNonEmpty), so
// that OpenSSL's record machinery is compiled once (docs/architecture.md,
// "One stream type for TCP and TLS"); plain TCP keeps the handler's own
// type. The erased handler has no associated executor or allocator: the TLS
// stream completes it on its own executor, which must be the session's (every
// handler runs on the one io_context of its session).

#include <boost/asio/async_result.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <boost/system/error_code.hpp>
#include <chrono>
#include <cstddef>
#include <memory>
#include <utility>
#include <variant>

namespace fencegate::proxy {

// A move-only void(error_code, size_t) completion handler of any type.
class ErasedIoHandler {
 public:
  // By value (a template, never a forwarding reference that would hide the
  // move constructor): the caller moves the handler in.
  template <class Handler>
  explicit ErasedIoHandler(Handler handler)
      : impl_(std::make_unique<Impl<Handler>>(std::move(handler))) {}

  void operator()(boost::system::error_code ec, std::size_t n) {
    std::unique_ptr<Base> impl = std::move(impl_);  // called once
    impl->Call(ec, n);
  }

 private:
  struct Base {
    Base() = default;
    Base(const Base&) = delete;
    Base& operator=(const Base&) = delete;
    virtual ~Base() = default;
    virtual void Call(boost::system::error_code ec, std::size_t n) = 0;
  };
  template <class Handler>
  struct Impl final : Base {
    explicit Impl(Handler&& h) : handler(std::move(h)) {}
    void Call(boost::system::error_code ec, std::size_t n) override {
      std::move(handler)(ec, n);
    }
    Handler handler;
  };
  std::unique_ptr<Base> impl_;
};

template <class Tcp>
class MaybeTlsStream {
 public:
  using Tls = boost::beast::ssl_stream<Tcp>;
  using executor_type = typename Tcp::executor_type;

  // Plain TCP when `tls` is null, else a TLS stream whose handshake the
  // owner runs (tls_stream()->async_handshake) before any read or write.
  MaybeTlsStream(Tcp&& tcp, boost::asio::ssl::context* tls)
      : stream_(Make(std::move(tcp), tls)) {}

  bool tls() const { return std::holds_alternative<Tls>(stream_); }
  Tls* tls_stream() { return std::get_if<Tls>(&stream_); }
  Tcp& tcp() {
    if (Tls* t = tls_stream()) return t->next_layer();
    return std::get<Tcp>(stream_);
  }
  auto& socket() { return tcp().socket(); }
  executor_type get_executor() noexcept {
    if (Tls* t = tls_stream()) return t->next_layer().get_executor();
    return std::get<Tcp>(stream_).get_executor();
  }
  template <class Duration>
  void expires_after(Duration d) {
    tcp().expires_after(d);
  }
  void expires_never() { tcp().expires_never(); }

  template <class MutableBuffers, class Token>
  auto async_read_some(const MutableBuffers& buffers, Token&& token) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code, std::size_t)>(
        [](auto handler, MaybeTlsStream* self, const MutableBuffers& b) {
          if (Tls* t = self->tls_stream()) {
            t->async_read_some(FirstNonEmpty<boost::asio::mutable_buffer>(b),
                               ErasedIoHandler(std::move(handler)));
          } else {
            std::get<Tcp>(self->stream_).async_read_some(b, std::move(handler));
          }
        },
        token, this, buffers);
  }

  template <class ConstBuffers, class Token>
  auto async_write_some(const ConstBuffers& buffers, Token&& token) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code, std::size_t)>(
        [](auto handler, MaybeTlsStream* self, const ConstBuffers& b) {
          if (Tls* t = self->tls_stream()) {
            t->async_write_some(FirstNonEmpty<boost::asio::const_buffer>(b),
                                ErasedIoHandler(std::move(handler)));
          } else {
            std::get<Tcp>(self->stream_).async_write_some(b, std::move(handler));
          }
        },
        token, this, buffers);
  }

 private:
  // The TLS stream reads into, or writes from, only the first non-empty
  // buffer of a sequence (asio::ssl's read_op and write_op): handing it that
  // one buffer is the same operation, with one buffer type for every caller.
  template <class Buffer, class Sequence>
  static Buffer FirstNonEmpty(const Sequence& buffers) {
    for (auto it = boost::asio::buffer_sequence_begin(buffers);
         it != boost::asio::buffer_sequence_end(buffers); ++it) {
      Buffer b(*it);
      if (b.size() != 0) return b;
    }
    return Buffer();
  }

  static std::variant<Tcp, Tls> Make(Tcp&& tcp, boost::asio::ssl::context* tls) {
    if (tls != nullptr) return std::variant<Tcp, Tls>(std::in_place_type<Tls>, std::move(tcp), *tls);
    return std::variant<Tcp, Tls>(std::in_place_type<Tcp>, std::move(tcp));
  }

  std::variant<Tcp, Tls> stream_;
};

}  // namespace fencegate::proxy
