// Successful loads: defaults, derived fields, the example files, Load(path).

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "test_util.h"

namespace fencegate::config {
namespace {

namespace fs = std::filesystem;
using testing::FailsAt;
using testing::MustLoad;

const fs::path kExamples = FENCEGATE_CONFIG_EXAMPLES_DIR;

Config LoadFile(const fs::path& path) {
  LoadResult result = Load(path.string());
  if (const auto* error = std::get_if<ConfigError>(&result)) {
    ADD_FAILURE() << error->message;
    return Config{};
  }
  return std::get<Config>(std::move(result));
}

TEST(LoadTest, MinimalConfigHasDocumentedDefaults) {
  Config c = LoadFile(kExamples / "minimal.yaml");
  EXPECT_EQ(c.source, (kExamples / "minimal.yaml").string());
  EXPECT_EQ(c.listen, "127.0.0.1:8080");
  EXPECT_EQ(c.endpoint, (Endpoint{"127.0.0.1", 8080}));
  EXPECT_EQ(c.threads, 0u);
  EXPECT_EQ(c.upstream.url, "http://127.0.0.1:9000");
  EXPECT_EQ(c.upstream.host, "127.0.0.1");
  EXPECT_EQ(c.upstream.port, 9000);
  EXPECT_EQ(c.upstream.base_path, "");
  EXPECT_EQ(c.upstream.connect_timeout, Duration(1000));
  EXPECT_EQ(c.upstream.timeout, Duration(30000));
  EXPECT_EQ(c.upstream.max_idle_connections, 64u);
  EXPECT_EQ(c.fencing.token_header, "Fencing-Token");
  EXPECT_TRUE(c.fencing.forward_token);
  EXPECT_TRUE(c.routes.empty());
  EXPECT_EQ(c.storage.engine, "rocksdb");
  EXPECT_EQ(c.storage.path, "./fencegate-data");
  EXPECT_EQ(c.storage.durability, Durability::kSync);
  EXPECT_EQ(c.storage.etcd.endpoints, std::vector<std::string>{"http://127.0.0.1:2379"});
  EXPECT_EQ(c.storage.etcd.prefix, "fencegate/");
  EXPECT_EQ(c.storage.etcd.forward_within, Duration(1000));
  EXPECT_EQ(c.storage.etcd.decision_timeout, Duration(5000));
  EXPECT_EQ(c.storage.etcd.max_batch, 40u);
  EXPECT_EQ(c.admin.listen, "127.0.0.1:9901");
  EXPECT_EQ(c.admin.endpoint, (Endpoint{"127.0.0.1", 9901}));
  EXPECT_EQ(c.admin.token, "");
  EXPECT_EQ(c.locks.listen, "");
  EXPECT_EQ(c.locks.endpoint, std::nullopt);
  EXPECT_EQ(c.locks.max_ttl, Duration(300000));
  EXPECT_EQ(c.limits.max_header_bytes, 16384u);
  EXPECT_EQ(c.limits.max_body_bytes, 10485760u);
  EXPECT_EQ(c.limits.header_timeout, Duration(10000));
  EXPECT_EQ(c.limits.idle_timeout, Duration(60000));
  EXPECT_EQ(c.limits.max_connections, 10000u);
  EXPECT_EQ(c.limits.max_waiting_per_key, 1024u);
  EXPECT_EQ(c.limits.max_connections_per_client, 0u);
  EXPECT_EQ(c.log.level, "info");
  EXPECT_TRUE(c.log.access_log);
}

TEST(LoadTest, FullExampleReadsEveryField) {
  Config c = LoadFile(kExamples / "full.yaml");
  EXPECT_EQ(c.listen, "127.0.0.1:8081");
  EXPECT_EQ(c.endpoint, (Endpoint{"127.0.0.1", 8081}));
  EXPECT_EQ(c.threads, 4u);
  EXPECT_EQ(c.upstream.url, "https://127.0.0.1:9000/api/");
  EXPECT_TRUE(c.upstream.https);
  EXPECT_EQ(c.upstream.host, "127.0.0.1");
  EXPECT_EQ(c.upstream.port, 9000);
  EXPECT_EQ(c.upstream.base_path, "/api");
  EXPECT_TRUE(c.tls.enabled);
  EXPECT_EQ(c.tls.cert_file, (FileRef{"/etc/fencegate/tls/server.pem", 9}));
  EXPECT_EQ(c.tls.key_file, (FileRef{"/etc/fencegate/tls/server.key", 10}));
  EXPECT_EQ(c.tls.client_ca_file, (FileRef{"/etc/fencegate/tls/clients-ca.pem", 11}));
  EXPECT_EQ(c.tls.min_version, TlsVersion::kTls13);
  const ClientTlsConfig& up = c.upstream.tls;
  EXPECT_TRUE(up.present);
  EXPECT_EQ(up.ca_file, (FileRef{"/etc/fencegate/tls/backend-ca.pem", 24}));
  EXPECT_TRUE(up.verify);
  EXPECT_EQ(up.server_name, "backend.internal");
  EXPECT_EQ(up.cert_file, (FileRef{"/etc/fencegate/tls/client.pem", 27}));
  EXPECT_EQ(up.key_file, (FileRef{"/etc/fencegate/tls/client.key", 28}));
  EXPECT_EQ(up.min_version, TlsVersion::kTls13);
  EXPECT_EQ(c.upstream.connect_timeout, Duration(2000));
  EXPECT_EQ(c.upstream.timeout, Duration(45000));
  EXPECT_EQ(c.upstream.max_idle_connections, 32u);
  EXPECT_EQ(c.fencing.token_header, "X-Fencing-Token");
  EXPECT_FALSE(c.fencing.forward_token);

  ASSERT_EQ(c.routes.size(), 2u);
  const RouteConfig& objects = c.routes[0];
  EXPECT_EQ(objects.name, "objects");
  EXPECT_EQ(objects.path_prefix, "/objects/");
  EXPECT_EQ(objects.path_regex, "");
  EXPECT_TRUE(objects.methods.empty());  // every method but GET, HEAD, OPTIONS, TRACE
  EXPECT_EQ(objects.key, "{path}");
  EXPECT_EQ(objects.mode, RouteMode::kEnforce);
  EXPECT_FALSE(objects.keep_path_params);
  EXPECT_FALSE(objects.case_insensitive);
  EXPECT_EQ(objects.idempotency, std::nullopt);
  EXPECT_EQ(objects.line, 36);
  const RouteConfig& tenants = c.routes[1];
  EXPECT_EQ(tenants.name, "tenants");
  EXPECT_EQ(tenants.path_prefix, "");
  EXPECT_EQ(tenants.path_regex, "^/tenants/([^/]+)/");
  EXPECT_EQ(tenants.methods, (std::vector<std::string>{"PUT", "DELETE"}));
  EXPECT_EQ(tenants.key, "tenant:{1}");
  EXPECT_EQ(tenants.mode, RouteMode::kShadow);
  EXPECT_EQ(tenants.idempotency, std::nullopt);
  EXPECT_EQ(tenants.line, 46);

  EXPECT_EQ(c.storage.engine, "rocksdb");
  EXPECT_EQ(c.storage.path, "/var/lib/fencegate");
  EXPECT_EQ(c.storage.durability, Durability::kAsync);
  EXPECT_EQ(c.storage.etcd.endpoints,
            (std::vector<std::string>{"https://10.0.0.1:2379", "https://10.0.0.2:2379"}));
  EXPECT_EQ(c.storage.etcd.prefix, "fg/");
  EXPECT_EQ(c.storage.etcd.forward_within, Duration(500));
  EXPECT_EQ(c.storage.etcd.max_batch, 20u);
  EXPECT_TRUE(c.storage.etcd.https);
  const ClientTlsConfig& etcd = c.storage.etcd.tls;
  EXPECT_TRUE(etcd.present);
  EXPECT_EQ(etcd.ca_file.path, "/etc/fencegate/tls/etcd-ca.pem");
  EXPECT_TRUE(etcd.verify);
  EXPECT_EQ(etcd.server_name, "etcd.internal");
  EXPECT_EQ(etcd.cert_file.path, "/etc/fencegate/tls/etcd-client.pem");
  EXPECT_EQ(etcd.key_file.path, "/etc/fencegate/tls/etcd-client.key");
  EXPECT_EQ(etcd.min_version, TlsVersion::kTls13);
  EXPECT_EQ(c.admin.listen, "127.0.0.1:9902");
  EXPECT_EQ(c.admin.endpoint, (Endpoint{"127.0.0.1", 9902}));
  EXPECT_EQ(c.admin.token, "change-me");
  EXPECT_EQ(c.locks.listen, "127.0.0.1:9903");
  EXPECT_EQ(c.locks.endpoint, (Endpoint{"127.0.0.1", 9903}));
  EXPECT_EQ(c.locks.max_ttl, Duration(60000));
  EXPECT_EQ(c.limits.max_header_bytes, 32768u);
  EXPECT_EQ(c.limits.max_body_bytes, 1048576u);
  EXPECT_EQ(c.limits.header_timeout, Duration(5000));
  EXPECT_EQ(c.limits.idle_timeout, Duration(120000));
  EXPECT_EQ(c.limits.max_connections, 500u);
  EXPECT_EQ(c.limits.drain_timeout, Duration(30000));
  EXPECT_EQ(c.limits.max_waiting_per_key, 64u);
  EXPECT_EQ(c.limits.max_connections_per_client, 100u);
  EXPECT_EQ(c.forwarding.trusted_hops, 1u);
  EXPECT_EQ(c.log.level, "debug");
  EXPECT_FALSE(c.log.access_log);
}

TEST(LoadTest, FullExampleSetsEveryFieldAwayFromItsDefault) {
  // Guards the round-trip test above: if full.yaml kept a default somewhere,
  // that test could not tell whether the field was read at all.
  Config full = LoadFile(kExamples / "full.yaml");
  Config minimal = LoadFile(kExamples / "minimal.yaml");
  EXPECT_NE(full.listen, minimal.listen);
  EXPECT_NE(full.threads, minimal.threads);
  EXPECT_NE(full.tls.enabled, minimal.tls.enabled);
  EXPECT_NE(full.tls.client_ca_file, minimal.tls.client_ca_file);
  EXPECT_NE(full.tls.min_version, minimal.tls.min_version);
  EXPECT_NE(full.upstream.https, minimal.upstream.https);
  EXPECT_NE(full.upstream.tls.ca_file, minimal.upstream.tls.ca_file);
  EXPECT_NE(full.upstream.tls.server_name, minimal.upstream.tls.server_name);
  EXPECT_NE(full.upstream.tls.cert_file, minimal.upstream.tls.cert_file);
  EXPECT_NE(full.upstream.tls.min_version, minimal.upstream.tls.min_version);
  EXPECT_NE(full.storage.etcd.tls, minimal.storage.etcd.tls);
  EXPECT_NE(full.upstream.connect_timeout, minimal.upstream.connect_timeout);
  EXPECT_NE(full.upstream.timeout, minimal.upstream.timeout);
  EXPECT_NE(full.upstream.max_idle_connections, minimal.upstream.max_idle_connections);
  EXPECT_NE(full.fencing, minimal.fencing);
  EXPECT_NE(full.fencing.forward_token, minimal.fencing.forward_token);
  EXPECT_NE(full.storage.path, minimal.storage.path);
  EXPECT_NE(full.storage.durability, minimal.storage.durability);
  EXPECT_NE(full.storage.etcd.endpoints, minimal.storage.etcd.endpoints);
  EXPECT_NE(full.storage.etcd.prefix, minimal.storage.etcd.prefix);
  EXPECT_NE(full.storage.etcd.forward_within, minimal.storage.etcd.forward_within);
  EXPECT_NE(full.storage.etcd.max_batch, minimal.storage.etcd.max_batch);
  EXPECT_NE(full.admin.listen, minimal.admin.listen);
  EXPECT_NE(full.admin.token, minimal.admin.token);
  EXPECT_NE(full.locks.listen, minimal.locks.listen);
  EXPECT_NE(full.limits.max_header_bytes, minimal.limits.max_header_bytes);
  EXPECT_NE(full.limits.max_body_bytes, minimal.limits.max_body_bytes);
  EXPECT_NE(full.limits.drain_timeout, minimal.limits.drain_timeout);
  EXPECT_NE(full.forwarding.trusted_hops, minimal.forwarding.trusted_hops);
  EXPECT_NE(full.limits.header_timeout, minimal.limits.header_timeout);
  EXPECT_NE(full.limits.idle_timeout, minimal.limits.idle_timeout);
  EXPECT_NE(full.limits.max_connections, minimal.limits.max_connections);
  EXPECT_NE(full.limits.max_waiting_per_key, minimal.limits.max_waiting_per_key);
  EXPECT_NE(full.limits.max_connections_per_client, minimal.limits.max_connections_per_client);
  EXPECT_NE(full.log.level, minimal.log.level);
  EXPECT_NE(full.log.access_log, minimal.log.access_log);
  EXPECT_NE(full.log.file, minimal.log.file);
  EXPECT_NE(full.log.access_log_file, minimal.log.access_log_file);
}

TEST(LoadTest, EveryExampleFileLoads) {
  ASSERT_TRUE(fs::is_directory(kExamples)) << kExamples;
  int count = 0;
  for (const fs::directory_entry& entry : fs::directory_iterator(kExamples)) {
    if (!entry.is_regular_file()) continue;
    SCOPED_TRACE(entry.path().string());
    LoadResult result = Load(entry.path().string());
    const auto* error = std::get_if<ConfigError>(&result);
    EXPECT_EQ(error, nullptr) << (error ? error->message : "");
    ++count;
  }
  EXPECT_GE(count, 4);  // minimal, full, regex and header examples
}

TEST(LoadTest, RegexAndHeaderExamplesUseTheirPlaceholders) {
  Config regex = LoadFile(kExamples / "regex_tenant.yaml");
  ASSERT_EQ(regex.routes.size(), 1u);
  EXPECT_EQ(regex.routes[0].key, "tenant/{1}");
  EXPECT_FALSE(regex.routes[0].path_regex.empty());
  Config header = LoadFile(kExamples / "header_tenant.yaml");
  ASSERT_EQ(header.routes.size(), 2u);
  EXPECT_EQ(header.routes[0].mode, RouteMode::kOff);
  EXPECT_EQ(header.routes[1].key, "{header:X-Tenant}:{path}");
}

TEST(LoadTest, LoadFromFileMatchesLoadFromString) {
  fs::path path =
      fs::temp_directory_path() / ("fencegate-config-test-" + std::to_string(::getpid()) + ".yaml");
  std::string text = "upstream:\n  url: http://10.0.0.5:81/base\nthreads: 3\n";
  {
    std::ofstream out(path);
    out << text;
  }
  Config from_file = LoadFile(path);
  fs::remove(path);
  Config from_string = MustLoad(text);
  from_string.source = path.string();
  EXPECT_EQ(from_file, from_string);
  EXPECT_EQ(from_file.threads, 3u);
  EXPECT_EQ(from_file.upstream.base_path, "/base");
}

TEST(LoadTest, UpstreamUrlIsSplitIntoHostPortAndBasePath) {
  struct Case {
    const char* url;
    const char* host;
    uint16_t port;
    const char* base_path;
  };
  const Case cases[] = {
      {"http://127.0.0.1:9000", "127.0.0.1", 9000, ""},
      {"http://backend", "backend", 80, ""},
      {"http://backend/", "backend", 80, ""},
      {"http://backend:8080/v1/", "backend", 8080, "/v1"},
      {"http://backend/a/b//", "backend", 80, "/a/b"},
      {"HTTP://Backend:1/x", "Backend", 1, "/x"},
      {"http://[::1]:9000/api", "::1", 9000, "/api"},
      {"http://backend:/x", "backend", 80, "/x"},
      {"https://backend", "backend", 443, ""},
      {"https://backend:8443/v1", "backend", 8443, "/v1"},
  };
  for (const Case& c : cases) {
    Config config = MustLoad(std::string("upstream: {url: \"") + c.url + "\"}\n");
    EXPECT_EQ(config.upstream.url, c.url);
    EXPECT_EQ(config.upstream.host, c.host) << c.url;
    EXPECT_EQ(config.upstream.port, c.port) << c.url;
    EXPECT_EQ(config.upstream.base_path, c.base_path) << c.url;
    EXPECT_EQ(config.upstream.https, std::string_view(c.url).substr(0, 6) == "https:") << c.url;
  }
}

TEST(LoadTest, EmptyListenStringsTurnAdminAndLocksOff) {
  Config c = MustLoad(std::string(testing::kUpstream) +
                      "admin: {listen: \"\"}\n"
                      "locks: {listen: \"\"}\n");
  EXPECT_EQ(c.admin.listen, "");
  EXPECT_EQ(c.admin.endpoint, std::nullopt);
  EXPECT_EQ(c.locks.endpoint, std::nullopt);
}

TEST(LoadTest, ListenersAcceptIpv6LocalhostAndPortZero) {
  Config c = MustLoad(std::string(testing::kUpstream) +
                      "listen: \"[::1]:0\"\n"
                      "admin: {listen: \"localhost:0\"}\n"
                      "locks: {listen: \"0.0.0.0:0\"}\n");
  EXPECT_EQ(c.endpoint, (Endpoint{"::1", 0}));
  EXPECT_EQ(c.admin.endpoint, (Endpoint{"localhost", 0}));
  EXPECT_EQ(c.locks.endpoint, (Endpoint{"0.0.0.0", 0}));
}

TEST(LoadTest, TheEtcdEngineLoadsWithIdempotency) {
  Config c = MustLoad(std::string(testing::kUpstream) +
                      "routes:\n  - path_prefix: /pay/\n    idempotency: 24h\n"
                      "storage:\n  engine: etcd\n");
  EXPECT_EQ(c.storage.engine, "etcd");
  EXPECT_EQ(MustLoad(std::string(testing::kUpstream) + "storage: {etcd: {forward_within: off}}\n")
                .storage.etcd.forward_within,
            Duration(0));
  ASSERT_EQ(c.routes.size(), 1u);
  EXPECT_TRUE(c.routes[0].idempotency.has_value());
}

TEST(LoadTest, EtcdSectionAndBooleanSpellings) {
  Config c =
      MustLoad(std::string(testing::kUpstream) +
               "storage: {engine: rocksdb, etcd: {endpoints: [\"http://e:2379\"], prefix: \"\"}}\n"
               "fencing: {forward_token: False}\n"
               "log: {access_log: TRUE, level: \"off\"}\n"
               "threads: 1024\n");
  EXPECT_EQ(c.storage.engine, "rocksdb");
  EXPECT_EQ(c.storage.etcd.endpoints, std::vector<std::string>{"http://e:2379"});
  EXPECT_EQ(c.storage.etcd.prefix, "");
  EXPECT_FALSE(c.fencing.forward_token);
  EXPECT_TRUE(c.log.access_log);
  EXPECT_EQ(c.log.level, "off");
  EXPECT_EQ(c.threads, 1024u);
}

TEST(LoadTest, EnumNames) {
  EXPECT_EQ(ToString(RouteMode::kEnforce), "enforce");
  EXPECT_EQ(ToString(RouteMode::kShadow), "shadow");
  EXPECT_EQ(ToString(RouteMode::kOff), "off");
  EXPECT_EQ(ToString(Durability::kSync), "sync");
  EXPECT_EQ(ToString(Durability::kAsync), "async");
}

}  // namespace
}  // namespace fencegate::config
