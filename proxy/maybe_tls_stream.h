#pragma once
// MaybeTlsStream: one connection, plain TCP or TLS over TCP, chosen when it
// is made. It is an Asio AsyncReadStream and AsyncWriteStream, so sessions
// read and write HTTP through it without knowing which. Timeouts stay those
// of the TCP layer (expires_after), which bound the TLS records and the
// handshake as well.

#include <boost/asio/async_result.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <boost/system/error_code.hpp>
#include <chrono>
#include <cstddef>
#include <utility>
#include <variant>

namespace fencegate::proxy {

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
            t->async_read_some(b, std::move(handler));
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
            t->async_write_some(b, std::move(handler));
          } else {
            std::get<Tcp>(self->stream_).async_write_some(b, std::move(handler));
          }
        },
        token, this, buffers);
  }

 private:
  static std::variant<Tcp, Tls> Make(Tcp&& tcp, boost::asio::ssl::context* tls) {
    if (tls != nullptr) return std::variant<Tcp, Tls>(std::in_place_type<Tls>, std::move(tcp), *tls);
    return std::variant<Tcp, Tls>(std::in_place_type<Tcp>, std::move(tcp));
  }

  std::variant<Tcp, Tls> stream_;
};

}  // namespace fencegate::proxy
