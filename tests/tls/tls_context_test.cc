// tls::Build: every file the TLS sections name is read, and each problem is
// reported as "FILE:LINE: field 'SECTION.FIELD': ...", the loader's format.
// The certificate and keys are made here with OpenSSL (P-256, valid for a
// day) in a temporary directory.

#include "tls/tls_context.h"

#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

namespace fencegate::tls {
namespace {

namespace fs = std::filesystem;

void WriteKey(EVP_PKEY* key, const fs::path& path) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr, nullptr), 1);
  std::fclose(f);
}

// A self-signed CA certificate for `key`: usable as a server certificate
// (Build does not verify its own chain) and as a CA file.
void WriteCertificate(EVP_PKEY* key, const fs::path& path) {
  X509* x = X509_new();
  X509_set_version(x, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
  X509_gmtime_adj(X509_getm_notBefore(x), -60);
  X509_gmtime_adj(X509_getm_notAfter(x), 24 * 3600);
  X509_set_pubkey(x, key);
  X509_NAME* name = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("fencegate test"), -1, -1, 0);
  X509_set_issuer_name(x, name);
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, x, x, nullptr, nullptr, 0);
  X509_EXTENSION* ext =
      X509V3_EXT_conf_nid(nullptr, &ctx, NID_basic_constraints, "critical,CA:TRUE");
  X509_add_ext(x, ext, -1);
  X509_EXTENSION_free(ext);
  ASSERT_GT(X509_sign(x, key, EVP_sha256()), 0);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(PEM_write_X509(f, x), 1);
  std::fclose(f);
  X509_free(x);
}

class TlsContextTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("fencegate-tls-test-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    EVP_PKEY* key = EVP_EC_gen("P-256");
    EVP_PKEY* other = EVP_EC_gen("P-256");
    ASSERT_NE(key, nullptr);
    ASSERT_NE(other, nullptr);
    WriteKey(key, Path("server.key"));
    WriteCertificate(key, Path("server.pem"));
    WriteKey(other, Path("other.key"));
    EVP_PKEY_free(key);
    EVP_PKEY_free(other);
    config_.source = "f.yaml";
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Path(const char* name) const { return (dir_ / name).string(); }

  void SetListener(const std::string& cert, const std::string& key) {
    config_.tls.enabled = true;
    config_.tls.cert_file = {cert, 3};
    config_.tls.key_file = {key, 4};
  }
  void SetHttpsUpstream() {
    config_.upstream.url = "https://127.0.0.1:9443";
    config_.upstream.https = true;
    config_.upstream.host = "127.0.0.1";
    config_.upstream.port = 9443;
  }

  // The error of Build, or "" when it succeeds.
  std::string BuildError() {
    Contexts contexts;
    std::string error;
    if (Build(config_, &contexts, &error)) return "";
    EXPECT_FALSE(error.empty());
    return error;
  }

  fs::path dir_;
  config::Config config_;
};

TEST_F(TlsContextTest, NothingToBuildForPlainConfigs) {
  Contexts contexts;
  std::string error;
  ASSERT_TRUE(Build(config_, &contexts, &error)) << error;
  EXPECT_EQ(contexts.listener, nullptr);
  EXPECT_EQ(contexts.upstream, nullptr);
  EXPECT_EQ(contexts.etcd, nullptr);
  EXPECT_TRUE(contexts.warnings.empty());
}

TEST_F(TlsContextTest, BuildsListenerAndUpstreamContexts) {
  SetListener(Path("server.pem"), Path("server.key"));
  config_.tls.client_ca_file = {Path("server.pem"), 5};
  SetHttpsUpstream();
  config_.upstream.tls.ca_file = {Path("server.pem"), 9};
  config_.upstream.tls.cert_file = {Path("server.pem"), 10};
  config_.upstream.tls.key_file = {Path("server.key"), 11};
  Contexts contexts;
  std::string error;
  ASSERT_TRUE(Build(config_, &contexts, &error)) << error;
  ASSERT_NE(contexts.listener, nullptr);
  ASSERT_NE(contexts.upstream, nullptr);
  EXPECT_EQ(SSL_CTX_get_verify_mode(contexts.listener->native_handle()),
            SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT);
  EXPECT_EQ(SSL_CTX_get_verify_mode(contexts.upstream->native_handle()), SSL_VERIFY_PEER);
  EXPECT_EQ(SSL_CTX_get_min_proto_version(contexts.upstream->native_handle()), TLS1_2_VERSION);
  EXPECT_TRUE(contexts.warnings.empty());
}

TEST_F(TlsContextTest, UpstreamDefaultsToTheSystemStoreAndVerifies) {
  SetHttpsUpstream();
  Contexts contexts;
  std::string error;
  ASSERT_TRUE(Build(config_, &contexts, &error)) << error;
  ASSERT_NE(contexts.upstream, nullptr);
  EXPECT_EQ(SSL_CTX_get_verify_mode(contexts.upstream->native_handle()), SSL_VERIFY_PEER);
}

TEST_F(TlsContextTest, VerifyFalseWarns) {
  SetHttpsUpstream();
  config_.upstream.tls.verify = false;
  config_.upstream.tls.min_version = config::TlsVersion::kTls13;
  Contexts contexts;
  std::string error;
  ASSERT_TRUE(Build(config_, &contexts, &error)) << error;
  EXPECT_EQ(SSL_CTX_get_verify_mode(contexts.upstream->native_handle()), SSL_VERIFY_NONE);
  EXPECT_EQ(SSL_CTX_get_min_proto_version(contexts.upstream->native_handle()), TLS1_3_VERSION);
  ASSERT_EQ(contexts.warnings.size(), 1u);
  EXPECT_NE(contexts.warnings[0].find("upstream.tls.verify is false"), std::string::npos);
}

TEST_F(TlsContextTest, MissingCertificateFile) {
  SetListener(Path("nope.pem"), Path("server.key"));
  EXPECT_EQ(BuildError(), "f.yaml:3: field 'tls.cert_file': cannot read '" + Path("nope.pem") +
                              "': No such file or directory");
}

TEST_F(TlsContextTest, MissingKeyFile) {
  SetListener(Path("server.pem"), Path("nope.key"));
  EXPECT_EQ(BuildError(), "f.yaml:4: field 'tls.key_file': cannot read '" + Path("nope.key") +
                              "': No such file or directory");
}

TEST_F(TlsContextTest, KeyOfAnotherCertificate) {
  SetListener(Path("server.pem"), Path("other.key"));
  std::string error = BuildError();
  EXPECT_EQ(error.rfind("f.yaml:4: field 'tls.key_file': ", 0), 0u) << error;
  EXPECT_NE(error.find("is not the private key of the certificate in tls.cert_file"),
            std::string::npos)
      << error;
}

TEST_F(TlsContextTest, FilesOfTheWrongKind) {
  SetListener(Path("server.key"), Path("server.key"));
  std::string error = BuildError();
  EXPECT_EQ(error.rfind("f.yaml:3: field 'tls.cert_file': ", 0), 0u) << error;
  EXPECT_NE(error.find("holds no usable PEM certificate"), std::string::npos) << error;

  SetListener(Path("server.pem"), Path("server.pem"));
  error = BuildError();
  EXPECT_EQ(error.rfind("f.yaml:4: field 'tls.key_file': ", 0), 0u) << error;
  EXPECT_NE(error.find("holds no usable PEM private key"), std::string::npos) << error;

  SetListener(Path("server.pem"), dir_.string());
  EXPECT_NE(BuildError().find("field 'tls.key_file': cannot read '" + dir_.string() +
                              "': is a directory"),
            std::string::npos);
}

TEST_F(TlsContextTest, BadCaFiles) {
  SetListener(Path("server.pem"), Path("server.key"));
  config_.tls.client_ca_file = {Path("server.key"), 5};
  std::string error = BuildError();
  EXPECT_EQ(error.rfind("f.yaml:5: field 'tls.client_ca_file': ", 0), 0u) << error;
  EXPECT_NE(error.find("holds no usable PEM CA certificate"), std::string::npos) << error;

  config_.tls = {};
  SetHttpsUpstream();
  config_.upstream.tls.ca_file = {Path("missing-ca.pem"), 7};
  EXPECT_EQ(BuildError().rfind("f.yaml:7: field 'upstream.tls.ca_file': cannot read", 0), 0u);
}

TEST_F(TlsContextTest, UpstreamClientCertificateIsChecked) {
  SetHttpsUpstream();
  config_.upstream.tls.cert_file = {Path("server.pem"), 10};
  config_.upstream.tls.key_file = {Path("other.key"), 11};
  EXPECT_EQ(BuildError().rfind("f.yaml:11: field 'upstream.tls.key_file': ", 0), 0u);
}

TEST_F(TlsContextTest, EtcdSectionIsBuiltForHttpsEndpoints) {
  config_.storage.etcd.endpoints = {"https://10.0.0.1:2379"};
  config_.storage.etcd.https = true;
  Contexts contexts;
  std::string error;
  ASSERT_TRUE(Build(config_, &contexts, &error)) << error;
  EXPECT_NE(contexts.etcd, nullptr);
  config_.storage.etcd.tls.ca_file = {Path("missing.pem"), 20};
  EXPECT_EQ(BuildError().rfind("f.yaml:20: field 'storage.etcd.tls.ca_file': cannot read", 0),
            0u);
}

}  // namespace
}  // namespace fencegate::tls
