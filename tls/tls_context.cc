#include "tls/tls_context.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include <boost/asio/ip/address.hpp>
#include <boost/asio/ssl/error.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

namespace fencegate::tls {
namespace {

// Reports problems with the files of one TLS section.
class Section {
 public:
  Section(std::string_view field, const std::string& source, std::string* error)
      : field_(field), source_(source), error_(error) {}

  // "FILE:LINE: field 'FIELD.NAME': WHAT". Always false.
  bool Fail(std::string_view name, const config::FileRef& file, std::string_view what) {
    *error_ = source_ + ":" + std::to_string(file.line) + ": field '" + field_ + "." +
              std::string(name) + "': " + std::string(what);
    return false;
  }

  // The file exists, is a regular file and can be opened for reading.
  bool Readable(std::string_view name, const config::FileRef& file) {
    std::error_code ec;
    if (std::filesystem::is_directory(file.path, ec)) {
      return Fail(name, file, "cannot read '" + file.path + "': is a directory");
    }
    std::FILE* f = std::fopen(file.path.c_str(), "rb");
    if (f == nullptr) {
      // generic_category().message(), unlike strerror(), is thread-safe.
      return Fail(name, file,
                  "cannot read '" + file.path + "': " + std::generic_category().message(errno));
    }
    (void)std::fclose(f);  // opened for reading only: nothing to lose on close
    return true;
  }

  const std::string& field() const { return field_; }

 private:
  std::string field_;
  const std::string& source_;
  std::string* error_;
};

// The reasons on OpenSSL's error queue, oldest first; empties the queue.
std::string OpenSslErrors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    const char* reason = ERR_reason_error_string(e);
    if (!out.empty()) out += "; ";
    out += reason != nullptr ? reason : "error " + std::to_string(ERR_GET_REASON(e));
  }
  return out.empty() ? "unknown OpenSSL error" : out;
}

// Keys must not be encrypted: without this OpenSSL would prompt on the
// terminal for a passphrase.
int NoPassphrase(char*, int, int, void*) { return -1; }

int VersionOf(config::TlsVersion version) {
  return version == config::TlsVersion::kTls13 ? TLS1_3_VERSION : TLS1_2_VERSION;
}

std::shared_ptr<Context> NewContext(Context::method method, config::TlsVersion min_version) {
  auto ctx = std::make_shared<Context>(method);
  SSL_CTX* raw = ctx->native_handle();
  SSL_CTX_set_min_proto_version(raw, VersionOf(min_version));
  SSL_CTX_set_options(raw, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
  SSL_CTX_set_default_passwd_cb(raw, NoPassphrase);
  return ctx;
}

// cert_file (a chain, leaf first) and key_file into `raw`, checked to match.
bool LoadCertificateAndKey(Section& s, SSL_CTX* raw, const config::FileRef& cert,
                           const config::FileRef& key) {
  if (!s.Readable("cert_file", cert)) return false;
  ERR_clear_error();
  if (SSL_CTX_use_certificate_chain_file(raw, cert.path.c_str()) != 1) {
    return s.Fail("cert_file", cert,
                  "'" + cert.path + "' holds no usable PEM certificate: " + OpenSslErrors());
  }
  if (!s.Readable("key_file", key)) return false;
  std::FILE* f = std::fopen(key.path.c_str(), "rb");
  if (f == nullptr) {
    return s.Fail("key_file", key,
                  "cannot read '" + key.path + "': " + std::generic_category().message(errno));
  }
  ERR_clear_error();
  EVP_PKEY* pkey = PEM_read_PrivateKey(f, nullptr, NoPassphrase, nullptr);
  (void)std::fclose(f);  // read-only
  if (pkey == nullptr) {
    return s.Fail("key_file", key,
                  "'" + key.path + "' holds no usable PEM private key (encrypted keys are not "
                  "supported): " + OpenSslErrors());
  }
  ERR_clear_error();
  bool used = SSL_CTX_use_PrivateKey(raw, pkey) == 1 && SSL_CTX_check_private_key(raw) == 1;
  EVP_PKEY_free(pkey);
  if (!used) {
    ERR_clear_error();
    return s.Fail("key_file", key,
                  "'" + key.path + "' is not the private key of the certificate in " + s.field() +
                      ".cert_file ('" + cert.path + "')");
  }
  return true;
}

// CA certificates to verify peers against.
bool LoadCas(Section& s, SSL_CTX* raw, std::string_view name, const config::FileRef& file) {
  if (!s.Readable(name, file)) return false;
  ERR_clear_error();
  if (SSL_CTX_load_verify_locations(raw, file.path.c_str(), nullptr) != 1) {
    return s.Fail(name, file,
                  "'" + file.path + "' holds no usable PEM CA certificate: " + OpenSslErrors());
  }
  return true;
}

// A function-local static, never deleted through a base pointer (the base,
// boost::system::error_category, has a non-virtual destructor by design).
class VerifyCategory final  // NOLINT(cppcoreguidelines-virtual-class-destructor)
    : public boost::system::error_category {
 public:
  const char* name() const noexcept override { return "tls-verify"; }
  std::string message(int code) const override {
    return std::string("certificate verify failed: ") + X509_verify_cert_error_string(code);
  }
};

const VerifyCategory& TheVerifyCategory() {
  static const VerifyCategory category;
  return category;
}

}  // namespace

std::shared_ptr<Context> ServerContext(const config::ListenerTlsConfig& tls,
                                       const std::string& source, std::string* error) {
  Section s("tls", source, error);
  auto ctx = NewContext(Context::tls_server, tls.min_version);
  SSL_CTX* raw = ctx->native_handle();
  SSL_CTX_set_options(raw, SSL_OP_CIPHER_SERVER_PREFERENCE);
  if (!LoadCertificateAndKey(s, raw, tls.cert_file, tls.key_file)) return nullptr;
  if (!tls.client_ca_file.empty()) {
    if (!LoadCas(s, raw, "client_ca_file", tls.client_ca_file)) return nullptr;
    // The CA names a client is offered to choose its certificate.
    STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(tls.client_ca_file.path.c_str());
    if (names == nullptr) {
      s.Fail("client_ca_file", tls.client_ca_file,
             "'" + tls.client_ca_file.path + "' holds no CA certificate: " + OpenSslErrors());
      return nullptr;
    }
    SSL_CTX_set_client_CA_list(raw, names);
    SSL_CTX_set_verify(raw, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  }
  // Session resumption with client certificates needs a session id context.
  static constexpr unsigned char kSessionContext[] = "fencegate";
  SSL_CTX_set_session_id_context(raw, kSessionContext, sizeof(kSessionContext) - 1);
  return ctx;
}

std::shared_ptr<Context> ClientContext(const config::ClientTlsConfig& tls, std::string_view field,
                                       const std::string& source, std::string* error) {
  Section s(field, source, error);
  auto ctx = NewContext(Context::tls_client, tls.min_version);
  SSL_CTX* raw = ctx->native_handle();
  if (tls.verify) {
    if (!tls.ca_file.empty()) {
      if (!LoadCas(s, raw, "ca_file", tls.ca_file)) return nullptr;
    } else {
      ERR_clear_error();
      if (SSL_CTX_set_default_verify_paths(raw) != 1) {
        *error = source + ":" + std::to_string(tls.line) + ": field '" + std::string(field) +
                 "': cannot load the system trust store: " + OpenSslErrors();
        return nullptr;
      }
    }
    SSL_CTX_set_verify(raw, SSL_VERIFY_PEER, nullptr);
  } else {
    SSL_CTX_set_verify(raw, SSL_VERIFY_NONE, nullptr);
  }
  if (!tls.cert_file.empty() && !LoadCertificateAndKey(s, raw, tls.cert_file, tls.key_file)) {
    return nullptr;
  }
  return ctx;
}

bool Build(const config::Config& config, Contexts* out, std::string* error) {
  *out = Contexts{};
  if (config.tls.enabled) {
    out->listener = ServerContext(config.tls, config.source, error);
    if (!out->listener) return false;
  }
  if (config.upstream.https) {
    out->upstream = ClientContext(config.upstream.tls, "upstream.tls", config.source, error);
    if (!out->upstream) return false;
    if (!config.upstream.tls.verify) {
      out->warnings.emplace_back(
          "upstream.tls.verify is false: the upstream's certificate is not checked, so anyone "
          "on the network path can pose as the backend");
    }
  }
  if (config.storage.etcd.https) {
    out->etcd = ClientContext(config.storage.etcd.tls, "storage.etcd.tls", config.source, error);
    if (!out->etcd) return false;
    if (!config.storage.etcd.tls.verify) {
      out->warnings.emplace_back("storage.etcd.tls.verify is false: etcd's certificate is not checked");
    }
  }
  return true;
}

bool PrepareClient(SSL* ssl, const std::string& name, bool verify, boost::system::error_code* ec) {
  boost::system::error_code not_ip;
  boost::asio::ip::make_address(name, not_ip);
  ERR_clear_error();
  if (not_ip && SSL_set_tlsext_host_name(ssl, name.c_str()) != 1) {
    *ec = boost::system::error_code(static_cast<int>(ERR_get_error()),
                                    boost::asio::error::get_ssl_category());
    return false;
  }
  if (verify) {
    // OpenSSL checks the name during verification (an IP address against
    // the certificate's IP entries), so a mismatch fails the handshake with
    // X509_V_ERR_HOSTNAME_MISMATCH / X509_V_ERR_IP_ADDRESS_MISMATCH.
    SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    if (SSL_set1_host(ssl, name.c_str()) != 1) {
      *ec = boost::system::error_code(static_cast<int>(ERR_get_error()),
                                      boost::asio::error::get_ssl_category());
      return false;
    }
  }
  return true;
}

boost::system::error_code DescribeHandshakeError(SSL* ssl, boost::system::error_code ec) {
  long result = SSL_get_verify_result(ssl);
  if (result != X509_V_OK) return {static_cast<int>(result), TheVerifyCategory()};
  return ec;
}

}  // namespace fencegate::tls
