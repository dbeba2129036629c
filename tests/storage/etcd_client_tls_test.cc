// EtcdClient over https: etcd serves a certificate made here (P-256,
// self-signed, for 127.0.0.1 and localhost); the client checks it and the
// name it was given.

#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdlib.h>

#include <boost/asio/ssl/context.hpp>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "storage/etcd_client.h"
#include "tests/support/etcd_process.h"

namespace fencegate::storage {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using std::chrono::milliseconds;
using fencegate::testing::EtcdCluster;

bool WriteKeyAndCertificate(const fs::path& key_path, const fs::path& cert_path) {
  EVP_PKEY* key = EVP_EC_gen("P-256");
  X509* x = X509_new();
  X509_set_version(x, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
  X509_gmtime_adj(X509_getm_notBefore(x), -60);
  X509_gmtime_adj(X509_getm_notAfter(x), 24 * 3600);
  X509_set_pubkey(x, key);
  X509_NAME* name = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("fencegate etcd test"), -1, -1,
                             0);
  X509_set_issuer_name(x, name);
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, x, x, nullptr, nullptr, 0);
  for (const auto& [nid, value] : {std::pair{NID_basic_constraints, "critical,CA:TRUE"},
                                   std::pair{NID_subject_alt_name, "IP:127.0.0.1,DNS:localhost"}}) {
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
    X509_add_ext(x, ext, -1);
    X509_EXTENSION_free(ext);
  }
  bool ok = X509_sign(x, key, EVP_sha256()) > 0;
  std::FILE* k = std::fopen(key_path.c_str(), "wb");
  std::FILE* c = std::fopen(cert_path.c_str(), "wb");
  ok = ok && k != nullptr && c != nullptr &&
       PEM_write_PrivateKey(k, key, nullptr, nullptr, 0, nullptr, nullptr) == 1 &&
       PEM_write_X509(c, x) == 1;
  if (k != nullptr) std::fclose(k);
  if (c != nullptr) std::fclose(c);
  X509_free(x);
  EVP_PKEY_free(key);
  return ok;
}

class EtcdClientTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "fencegate-etcd-tls-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    ASSERT_TRUE(WriteKeyAndCertificate(dir_ / "etcd.key", dir_ / "etcd.pem"));
    EtcdCluster::Options options;
    options.cert_file = (dir_ / "etcd.pem").string();
    options.key_file = (dir_ / "etcd.key").string();
    std::string error;
    etcd_ = EtcdCluster::Start(options, &error);
    ASSERT_NE(etcd_, nullptr) << error;
    ASSERT_EQ(etcd_->endpoint(0).rfind("https://", 0), 0u) << etcd_->endpoint(0);
  }
  void TearDown() override {
    etcd_.reset();
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }

  // A client of the https endpoint whose context trusts `ca` ("" = the
  // system's trust store only).
  Status CallWith(const std::string& ca, const std::string& server_name) {
    boost::asio::ssl::context context(boost::asio::ssl::context::tls_client);
    context.set_verify_mode(boost::asio::ssl::verify_peer);
    if (!ca.empty()) context.load_verify_file(ca);
    EtcdClientOptions options;
    options.endpoints = {etcd_->endpoint(0)};
    options.tls = &context;
    options.tls_server_name = server_name;
    options.request_timeout = milliseconds(2000);
    options.retry_backoff = milliseconds(0);
    std::unique_ptr<EtcdClient> client;
    Status s = EtcdClient::Open(options, &client);
    if (!s.ok()) return s;
    json answer;
    const json put = {{"key", EtcdClient::Base64("k")}, {"value", EtcdClient::Base64("v")}};
    s = client->Call("/v3/kv/put", put, &answer, false);
    if (!s.ok()) return s;
    s = client->Call("/v3/kv/range", {{"key", EtcdClient::Base64("k")}}, &answer, true);
    if (s.ok() && answer["kvs"][0].value("value", "") != EtcdClient::Base64("v")) {
      return Status::Corruption("the range does not show the put: " + answer.dump());
    }
    return s;
  }

  fs::path dir_;
  std::unique_ptr<EtcdCluster> etcd_;
};

TEST_F(EtcdClientTlsTest, TrustedCertificateWithTheRightName) {
  const std::string ca = (dir_ / "etcd.pem").string();
  Status s = CallWith(ca, "");  // the endpoint's IP address, in the certificate
  EXPECT_TRUE(s.ok()) << s.ToString();
  s = CallWith(ca, "localhost");
  EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST_F(EtcdClientTlsTest, WrongNameOrUntrustedCertificateIsRefused) {
  Status s = CallWith((dir_ / "etcd.pem").string(), "etcd.example");
  EXPECT_EQ(s.code(), Status::Code::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("hostname mismatch"), std::string::npos) << s.ToString();
  s = CallWith("", "");
  EXPECT_EQ(s.code(), Status::Code::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("certificate"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace fencegate::storage
