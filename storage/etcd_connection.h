#pragma once
// EtcdConnection: the one kept-alive HTTP/1.1 connection of an EtcdClient
// (storage/etcd_client.h), and the endpoint URLs it connects to. Blocking:
// every operation runs a private io_context on the calling thread until it
// completes or its deadline passes, and never waits longer than that
// deadline (a host name's lookup aside, see Post). Not thread-safe: one
// thread at a time, as the client that owns it.

#include <boost/asio/io_context.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <boost/system/error_code.hpp>
#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace fencegate::storage {

// One etcd endpoint: "http://host:port" or "https://host:port" (an IPv6
// address in brackets; port 2379 when absent; no path but "/").
struct EtcdEndpoint {
  std::string url;   // as given, to name the endpoint in errors
  bool tls = false;  // https
  std::string host;  // without brackets
  std::string port;
  std::string host_header;  // host:port as the URL spells it
};

// false + *error when `url` is not such a URL.
bool ParseEtcdEndpoint(std::string_view url, EtcdEndpoint* out, std::string* error);

// What one POST came to.
struct HttpAnswer {
  // A failure below HTTP: lookup, connect, TLS handshake, write, read, or
  // the deadline (boost::beast::error::timeout). Empty when an answer came.
  boost::system::error_code error;
  std::string stage;  // where `error` happened: "resolve", "connect", "tls", "write", "read"
  // Some of the request may have reached the server: false only when the
  // failure came before a byte of it was written.
  bool sent = false;
  unsigned status = 0;  // the HTTP status, when an answer came
  std::string body;
};

class EtcdConnection {
 public:
  using Clock = std::chrono::steady_clock;

  // tls: the context of https endpoints (not owned; nullptr when there are
  // none). server_name: the name TLS sends (SNI) and verifies the
  // certificate against; "" = the endpoint's host.
  EtcdConnection(boost::asio::ssl::context* tls, std::string server_name,
                 size_t max_response_bytes);
  ~EtcdConnection();
  EtcdConnection(const EtcdConnection&) = delete;
  EtcdConnection& operator=(const EtcdConnection&) = delete;

  // POSTs `body` (JSON) to `path` of `endpoint` and reads the answer, all
  // before `deadline`. Reuses the open connection when it leads to the same
  // endpoint and the server has not closed it meanwhile, else opens a new
  // one. A transport failure closes the connection, as does an answer that
  // asks for it. A host name (not an IP address) is looked up with
  // getaddrinfo, whose own wait (resolv.conf) can outlast the deadline when
  // the lookup of an earlier call is still running: use IP addresses where
  // that matters.
  HttpAnswer Post(const EtcdEndpoint& endpoint, std::string_view path, const std::string& body,
                  std::string_view authorization, Clock::time_point deadline);

  // Closes the connection (no TLS close_notify: it would wait on the peer).
  void Close();

 private:
  using TcpStream = boost::beast::tcp_stream;
  using TlsStream = boost::beast::ssl_stream<TcpStream>;

  boost::system::error_code Open(const EtcdEndpoint& endpoint, Clock::time_point deadline,
                                 std::string* stage);
  // Whether the open connection is still usable: the server has neither
  // closed it nor sent anything while it was idle.
  bool IdleAndOpen();
  TcpStream& Lowest();
  template <class Stream>
  HttpAnswer Exchange(Stream& stream, const EtcdEndpoint& endpoint, std::string_view path,
                      const std::string& body, std::string_view authorization,
                      Clock::time_point deadline);
  // Runs the io_context until *done, or until `deadline` passes (then closes
  // the connection, so that what is pending completes, and still runs until
  // *done: handlers refer to the caller's frame).
  void RunUntil(const bool& done, Clock::time_point deadline);

  boost::asio::io_context ioc_;
  boost::asio::ssl::context* tls_context_;
  std::string server_name_;
  size_t max_response_bytes_;
  std::optional<TcpStream> tcp_;  // the open plain connection
  std::optional<TlsStream> tls_;  // the open TLS connection
  std::string open_url_;          // the endpoint it leads to; "" = none open
};

}  // namespace fencegate::storage
