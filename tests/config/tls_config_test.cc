// The TLS sections of the config: the listener's `tls`, `upstream.tls` and
// `storage.etcd.tls`. Load() only checks their shape; the files they name
// are read by tls::Build (tests/tls).

#include <gtest/gtest.h>

#include "test_util.h"

namespace fencegate::config {
namespace {

using testing::FailsAt;
using testing::kUpstream;
using testing::MustLoad;

using testing::WithUpstream;

TEST(TlsConfigTest, ListenerTlsIsOffByDefault) {
  Config c = MustLoad(kUpstream);
  EXPECT_FALSE(c.tls.enabled);
  EXPECT_FALSE(c.upstream.https);
  EXPECT_FALSE(c.upstream.tls.present);
  EXPECT_TRUE(c.upstream.tls.verify);
  EXPECT_FALSE(c.storage.etcd.https);
}

TEST(TlsConfigTest, ListenerTlsReadsFilesWithTheirLines) {
  Config c = MustLoad(WithUpstream("tls:\n"
                                   "  cert_file: server.pem\n"
                                   "  key_file: /k/server.key\n"
                                   "  client_ca_file: clients.pem\n"
                                   "  min_version: \"1.3\"\n"));
  EXPECT_TRUE(c.tls.enabled);
  EXPECT_EQ(c.tls.line, 2);
  EXPECT_EQ(c.tls.cert_file, (FileRef{"server.pem", 3}));
  EXPECT_EQ(c.tls.key_file, (FileRef{"/k/server.key", 4}));
  EXPECT_EQ(c.tls.client_ca_file, (FileRef{"clients.pem", 5}));
  EXPECT_EQ(c.tls.min_version, TlsVersion::kTls13);
}

TEST(TlsConfigTest, ListenerTlsDefaults) {
  Config c = MustLoad(WithUpstream("tls: {cert_file: a.pem, key_file: a.key}\n"));
  EXPECT_TRUE(c.tls.enabled);
  EXPECT_TRUE(c.tls.client_ca_file.empty());
  EXPECT_EQ(c.tls.min_version, TlsVersion::kTls12);
  EXPECT_EQ(ToString(c.tls.min_version), "1.2");
}

TEST(TlsConfigTest, ListenerTlsNeedsCertificateAndKey) {
  EXPECT_TRUE(FailsAt(WithUpstream("tls:\n  key_file: a.key\n"), 2, "tls.cert_file", "is missing"));
  EXPECT_TRUE(FailsAt(WithUpstream("tls:\n  cert_file: a.pem\n"), 2, "tls.key_file", "is missing"));
  EXPECT_TRUE(FailsAt(WithUpstream("tls:\n  cert_file: a.pem\n  key_file: \"\"\n"), 4,
                      "tls.key_file", "is empty"));
  EXPECT_TRUE(FailsAt(WithUpstream("tls:\n"), 2, "tls", "empty (no value)"));
}

TEST(TlsConfigTest, ListenerTlsIsStrict) {
  EXPECT_TRUE(FailsAt(WithUpstream("tls:\n  cert_file: a.pem\n  key_file: a.key\n  verify: false\n"),
                      5, "tls.verify", "unknown key"));
  EXPECT_TRUE(FailsAt(WithUpstream("tls:\n  cert_file: a.pem\n  key_file: a.key\n"
                                   "  min_version: \"1.1\"\n"),
                      5, "tls.min_version", "'1.1' is not allowed"));
  EXPECT_TRUE(FailsAt(WithUpstream("tls:\n  cert_file: [a.pem]\n  key_file: a.key\n"), 3,
                      "tls.cert_file", "is a list"));
}

TEST(TlsConfigTest, HttpsUpstreamVerifiesByDefault) {
  Config c = MustLoad("upstream: {url: \"https://backend.internal:9443/api\"}\n");
  EXPECT_TRUE(c.upstream.https);
  EXPECT_EQ(c.upstream.host, "backend.internal");
  EXPECT_EQ(c.upstream.port, 9443);
  EXPECT_FALSE(c.upstream.tls.present);
  EXPECT_TRUE(c.upstream.tls.verify);
  EXPECT_TRUE(c.upstream.tls.ca_file.empty());
  EXPECT_EQ(c.upstream.tls.server_name, "");
}

TEST(TlsConfigTest, UpstreamTlsReadsEveryField) {
  Config c = MustLoad("upstream:\n"
                      "  url: https://10.0.0.7\n"
                      "  tls:\n"
                      "    ca_file: ca.pem\n"
                      "    server_name: backend.internal\n"
                      "    cert_file: client.pem\n"
                      "    key_file: client.key\n"
                      "    min_version: \"1.3\"\n"
                      "    verify: true\n");
  const ClientTlsConfig& t = c.upstream.tls;
  EXPECT_TRUE(t.present);
  EXPECT_EQ(t.line, 3);
  EXPECT_EQ(t.ca_file, (FileRef{"ca.pem", 4}));
  EXPECT_EQ(t.server_name, "backend.internal");
  EXPECT_EQ(t.cert_file, (FileRef{"client.pem", 6}));
  EXPECT_EQ(t.key_file, (FileRef{"client.key", 7}));
  EXPECT_EQ(t.min_version, TlsVersion::kTls13);
  EXPECT_TRUE(t.verify);
  EXPECT_EQ(c.upstream.port, 443);
}

TEST(TlsConfigTest, VerifyFalseMustBeExplicitAndNeedsHttps) {
  Config c = MustLoad("upstream:\n  url: https://h\n  tls: {verify: false}\n");
  EXPECT_FALSE(c.upstream.tls.verify);
  EXPECT_TRUE(FailsAt("upstream:\n  url: http://h\n  tls: {verify: false}\n", 3, "upstream.tls",
                      "is not https"));
  // The order of the keys does not matter.
  EXPECT_TRUE(FailsAt("upstream:\n  tls:\n    verify: false\n  url: http://h\n", 2, "upstream.tls",
                      "is not https"));
  EXPECT_TRUE(FailsAt("upstream:\n  url: https://h\n  tls: {verify: no}\n", 3,
                      "upstream.tls.verify", "not a boolean"));
}

TEST(TlsConfigTest, UpstreamTlsContradictionsAreErrors) {
  EXPECT_TRUE(FailsAt("upstream:\n  url: https://h\n  tls:\n    verify: false\n    ca_file: ca.pem\n",
                      5, "upstream.tls.ca_file", "verify is false"));
  EXPECT_TRUE(FailsAt("upstream:\n  url: https://h\n  tls:\n    cert_file: c.pem\n", 4,
                      "upstream.tls.cert_file", "without key_file"));
  EXPECT_TRUE(FailsAt("upstream:\n  url: https://h\n  tls:\n    key_file: c.key\n", 4,
                      "upstream.tls.key_file", "without cert_file"));
  EXPECT_TRUE(FailsAt("upstream:\n  url: https://h\n  tls:\n    server_name: \"a b\"\n", 4,
                      "upstream.tls.server_name", "not a host name"));
  EXPECT_TRUE(FailsAt("upstream:\n  url: https://h\n  tls:\n    sni: a\n", 4, "upstream.tls.sni",
                      "unknown key"));
}

TEST(TlsConfigTest, EtcdEndpointsMayBeHttpsWithATlsSection) {
  Config c = MustLoad(WithUpstream("storage:\n"
                                   "  etcd:\n"
                                   "    endpoints: [\"https://10.0.0.1:2379\", \"https://e2:2379\"]\n"
                                   "    tls:\n"
                                   "      ca_file: etcd-ca.pem\n"
                                   "      cert_file: etcd-client.pem\n"
                                   "      key_file: etcd-client.key\n"));
  EXPECT_TRUE(c.storage.etcd.https);
  EXPECT_TRUE(c.storage.etcd.tls.present);
  EXPECT_EQ(c.storage.etcd.tls.ca_file, (FileRef{"etcd-ca.pem", 6}));
  Config plain = MustLoad(WithUpstream("storage: {etcd: {endpoints: [\"https://e:2379\"]}}\n"));
  EXPECT_TRUE(plain.storage.etcd.https);
  EXPECT_FALSE(plain.storage.etcd.tls.present);
}

TEST(TlsConfigTest, EtcdEndpointErrors) {
  EXPECT_TRUE(FailsAt(WithUpstream("storage:\n  etcd:\n    endpoints: [\"10.0.0.1:2379\"]\n"), 4,
                      "storage.etcd.endpoints[0]", "not an etcd URL"));
  EXPECT_TRUE(FailsAt(
      WithUpstream("storage:\n  etcd:\n    endpoints: [\"https://a:1\", \"http://b:1\"]\n"), 4,
      "storage.etcd.endpoints[1]", "mixes http and https"));
  EXPECT_TRUE(FailsAt(WithUpstream("storage:\n  etcd:\n    tls: {verify: false}\n"), 4,
                      "storage.etcd.tls", "are not https"));
}

}  // namespace
}  // namespace fencegate::config
