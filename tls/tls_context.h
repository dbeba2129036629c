#pragma once
// TLS contexts built from the config: the client listener's server context,
// the upstream's client context and, for the planned etcd engine, etcd's.
// Every file the config names is read here, once, when fencegate starts or
// runs --check; an error names the config file, the line and the field, as
// the loader's errors do ("fencegate.yaml:4: field 'tls.key_file': ...").
// Contexts are immutable once built and shared by every worker thread
// (OpenSSL allows SSL_new on one SSL_CTX from many threads).

#include <openssl/ssl.h>

#include <boost/asio/ssl/context.hpp>
#include <boost/system/error_code.hpp>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"

namespace fencegate::tls {

using Context = boost::asio::ssl::context;

struct Contexts {
  std::shared_ptr<Context> listener;  // nullptr: the client listener speaks plain HTTP
  std::shared_ptr<Context> upstream;  // nullptr: the upstream URL is http
  std::shared_ptr<Context> etcd;      // nullptr: etcd endpoints are http (engine planned)
  std::vector<std::string> warnings;  // to log at start, e.g. a verify: false
};

// Builds every context `config` asks for. false + *error on the first
// missing or unreadable file, a file without a certificate or key, a key
// that does not match its certificate.
bool Build(const config::Config& config, Contexts* out, std::string* error);

// The parts of Build, for tests. `field` is the section's dotted name
// ("upstream.tls"), `source` the config file's name.
std::shared_ptr<Context> ServerContext(const config::ListenerTlsConfig& tls,
                                       const std::string& source, std::string* error);
std::shared_ptr<Context> ClientContext(const config::ClientTlsConfig& tls, std::string_view field,
                                       const std::string& source, std::string* error);

// Per client connection, before its handshake: SNI (not for an IP address,
// RFC 6066) and, when `verify`, the name the peer's certificate must carry
// (a DNS name, or an IP address in its subjectAltName). false + *ec when
// OpenSSL refuses the name.
bool PrepareClient(SSL* ssl, const std::string& name, bool verify, boost::system::error_code* ec);

// After a failed client handshake: when the peer's certificate was refused,
// an error in the "tls-verify" category whose message says why ("certificate
// verify failed: hostname mismatch"); otherwise `ec` unchanged.
boost::system::error_code DescribeHandshakeError(SSL* ssl, boost::system::error_code ec);

}  // namespace fencegate::tls
