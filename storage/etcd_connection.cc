#include "storage/etcd_connection.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <cerrno>
#include <charconv>
#include <memory>
#include <utility>
#include <vector>

namespace fencegate::storage {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;
using boost::system::error_code;

namespace {

// How long past its deadline an operation may take to notice it: the
// stream's own timer completes it at the deadline; this is only a backstop.
constexpr std::chrono::milliseconds kBackstop{200};
constexpr size_t kMaxHeaderBytes = size_t{16} * 1024;

bool ValidPort(std::string_view port) {
  unsigned value = 0;
  const char* end = port.data() + port.size();
  auto [ptr, ec] = std::from_chars(port.data(), end, value);
  return !port.empty() && ec == std::errc() && ptr == end && value >= 1 && value <= 65535;
}

}  // namespace

bool ParseEtcdEndpoint(std::string_view url, EtcdEndpoint* out, std::string* error) {
  *out = EtcdEndpoint{};
  out->url = std::string(url);
  std::string_view rest;
  if (url.starts_with("http://")) {
    rest = url.substr(7);
  } else if (url.starts_with("https://")) {
    rest = url.substr(8);
    out->tls = true;
  } else {
    *error = "etcd endpoint '" + std::string(url) + "': expected http://host:port or https://host:port";
    return false;
  }
  if (rest.ends_with('/')) rest.remove_suffix(1);
  if (rest.find_first_of("/?#@ ") != std::string_view::npos) {
    *error = "etcd endpoint '" + std::string(url) + "': only a scheme, a host and a port";
    return false;
  }
  out->host_header = std::string(rest);
  std::string_view port;
  if (rest.starts_with('[')) {
    const size_t close = rest.find(']');
    if (close == std::string_view::npos) {
      *error = "etcd endpoint '" + std::string(url) + "': unclosed '[' in the host";
      return false;
    }
    out->host = std::string(rest.substr(1, close - 1));
    std::string_view after = rest.substr(close + 1);
    if (!after.empty() && !after.starts_with(':')) {
      *error = "etcd endpoint '" + std::string(url) + "': expected ':port' after the address";
      return false;
    }
    if (!after.empty()) port = after.substr(1);
    else port = "2379";
  } else {
    const size_t colon = rest.find(':');
    out->host = std::string(rest.substr(0, colon));
    port = colon == std::string_view::npos ? std::string_view("2379") : rest.substr(colon + 1);
  }
  if (out->host.empty() || !ValidPort(port)) {
    *error = "etcd endpoint '" + std::string(url) + "': a host and a port from 1 to 65535";
    return false;
  }
  out->port = std::string(port);
  return true;
}

EtcdConnection::EtcdConnection(asio::ssl::context* tls, std::string server_name,
                               size_t max_response_bytes)
    : tls_context_(tls), server_name_(std::move(server_name)),
      max_response_bytes_(max_response_bytes) {}

EtcdConnection::~EtcdConnection() { Close(); }

EtcdConnection::TcpStream& EtcdConnection::Lowest() {
  return tls_ ? beast::get_lowest_layer(*tls_) : *tcp_;
}

void EtcdConnection::Close() {
  if (tcp_ || tls_) {
    error_code ignored;
    Lowest().socket().shutdown(tcp::socket::shutdown_both, ignored);
    Lowest().socket().close(ignored);
  }
  tls_.reset();
  tcp_.reset();
  open_url_.clear();
}

void EtcdConnection::RunUntil(const bool& done, Clock::time_point deadline) {
  if (ioc_.stopped()) ioc_.restart();
  while (!done) {
    if (ioc_.run_one_until(deadline + kBackstop) == 0) break;
  }
  if (done) return;
  // The backstop: close the socket (not the stream: a pending TLS operation
  // refers to it) so that the pending operation completes now.
  if (tcp_ || tls_) {
    error_code ignored;
    Lowest().socket().close(ignored);
  }
  if (ioc_.stopped()) ioc_.restart();
  while (!done && ioc_.run_one() != 0) {
  }
}

bool EtcdConnection::IdleAndOpen() {
  // Nothing may arrive on an idle HTTP/1.1 connection: bytes or the end of
  // the stream there mean the server closed it (a TLS close_notify is
  // bytes too).
  char byte = 0;
  const ssize_t n = ::recv(Lowest().socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

error_code EtcdConnection::Open(const EtcdEndpoint& endpoint, Clock::time_point deadline,
                                std::string* stage) {
  Close();
  *stage = "resolve";
  std::vector<tcp::endpoint> targets;
  const auto port = static_cast<uint16_t>(std::stoi(endpoint.port));
  error_code ec;
  const asio::ip::address address = asio::ip::make_address(endpoint.host, ec);
  if (!ec) {
    targets.emplace_back(address, port);
  } else {
    // The lookup's state is shared with its handler, which may run in a
    // later call when the lookup outlasts this deadline.
    struct Lookup {
      explicit Lookup(asio::io_context& ioc) : resolver(ioc) {}
      tcp::resolver resolver;
      bool done = false;
      error_code ec;
      tcp::resolver::results_type results;
    };
    auto lookup = std::make_shared<Lookup>(ioc_);
    lookup->resolver.async_resolve(endpoint.host, endpoint.port,
                                   [lookup](error_code e, tcp::resolver::results_type r) {
                                     lookup->ec = e;
                                     lookup->results = std::move(r);
                                     lookup->done = true;
                                   });
    if (ioc_.stopped()) ioc_.restart();
    while (!lookup->done && ioc_.run_one_until(deadline) != 0) {
    }
    if (!lookup->done) {
      lookup->resolver.cancel();
      return beast::error::timeout;
    }
    if (lookup->ec) return lookup->ec;
    for (const auto& entry : lookup->results) targets.push_back(entry.endpoint());
  }

  *stage = "connect";
  if (endpoint.tls) {
    if (tls_context_ == nullptr) return asio::error::no_protocol_option;
    tls_.emplace(ioc_, *tls_context_);
  } else {
    tcp_.emplace(ioc_);
  }
  Lowest().expires_at(deadline);
  bool done = false;
  Lowest().async_connect(targets, [&](error_code e, const tcp::endpoint&) {
    ec = e;
    done = true;
  });
  RunUntil(done, deadline);
  if (ec) {
    Close();
    return ec;
  }
  Lowest().socket().set_option(tcp::no_delay(true), ec);

  if (tls_) {
    *stage = "tls handshake";
    const std::string& name = server_name_.empty() ? endpoint.host : server_name_;
    SSL* ssl = tls_->native_handle();
    error_code not_ip;
    asio::ip::make_address(name, not_ip);
    ERR_clear_error();
    // SNI only for a name (RFC 6066); OpenSSL checks the certificate against
    // the name, or an IP address against its IP entries, while it verifies.
    if ((not_ip && SSL_set_tlsext_host_name(ssl, name.c_str()) != 1) ||
        SSL_set1_host(ssl, name.c_str()) != 1) {
      Close();
      return {static_cast<int>(ERR_get_error()), asio::error::get_ssl_category()};
    }
    SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    done = false;
    tls_->async_handshake(asio::ssl::stream_base::client, [&](error_code e) {
      ec = e;
      done = true;
    });
    RunUntil(done, deadline);
    if (ec) {
      const long verify = SSL_get_verify_result(ssl);
      if (verify != X509_V_OK) {
        *stage += std::string(" (certificate: ") + X509_verify_cert_error_string(verify) + ")";
      }
      Close();
      return ec;
    }
  }
  open_url_ = endpoint.url;
  return {};
}

template <class Stream>
HttpAnswer EtcdConnection::Exchange(Stream& stream, const EtcdEndpoint& endpoint,
                                    std::string_view path, const std::string& body,
                                    std::string_view authorization, Clock::time_point deadline) {
  HttpAnswer answer;
  http::request<http::string_body> request{http::verb::post, std::string(path), 11};
  request.set(http::field::host, endpoint.host_header);
  request.set(http::field::content_type, "application/json");
  if (!authorization.empty()) request.set(http::field::authorization, authorization);
  request.keep_alive(true);
  request.body() = body;
  request.prepare_payload();

  Lowest().expires_at(deadline);
  answer.sent = true;
  error_code ec;
  bool done = false;
  http::async_write(stream, request, [&](error_code e, size_t) {
    ec = e;
    done = true;
  });
  RunUntil(done, deadline);
  if (ec) {
    answer.error = ec;
    answer.stage = "write";
    Close();
    return answer;
  }

  http::response_parser<http::string_body> parser;
  parser.header_limit(kMaxHeaderBytes);
  parser.body_limit(max_response_bytes_);
  beast::flat_buffer buffer;
  done = false;
  http::async_read(stream, buffer, parser, [&](error_code e, size_t) {
    ec = e;
    done = true;
  });
  RunUntil(done, deadline);
  if (ec) {
    answer.error = ec;
    answer.stage = "read";
    Close();
    return answer;
  }
  auto& response = parser.get();
  answer.status = response.result_int();
  answer.body = std::move(response.body());
  // Bytes beyond the answer: the server and this client no longer agree on
  // where messages begin.
  if (!response.keep_alive() || buffer.size() != 0) {
    Close();
  } else {
    Lowest().expires_never();
  }
  return answer;
}

HttpAnswer EtcdConnection::Post(const EtcdEndpoint& endpoint, std::string_view path,
                                const std::string& body, std::string_view authorization,
                                Clock::time_point deadline) {
  if (!open_url_.empty() && (open_url_ != endpoint.url || !IdleAndOpen())) Close();
  if (open_url_.empty()) {
    HttpAnswer failed;
    failed.error = Open(endpoint, deadline, &failed.stage);
    if (failed.error) return failed;
  }
  if (tls_) return Exchange(*tls_, endpoint, path, body, authorization, deadline);
  return Exchange(*tcp_, endpoint, path, body, authorization, deadline);
}

}  // namespace fencegate::storage
