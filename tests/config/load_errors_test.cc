// Load() errors outside routes: each names the file, the line and the field.

#include <gtest/gtest.h>

#include "test_util.h"

namespace fencegate::config {
namespace {

using testing::ErrorOf;
using testing::FailsAt;
using testing::kUpstream;

using testing::WithUpstream;

TEST(LoadErrorsTest, UnknownKeyAtTheRoot) {
  EXPECT_TRUE(
      FailsAt(WithUpstream("listen: \"127.0.0.1:1\"\nthread: 4\n"), 3, "thread", "unknown key"));
}

TEST(LoadErrorsTest, UnknownKeyInsideASection) {
  EXPECT_TRUE(FailsAt("upstream:\n  url: http://h\n  timeuot: 5s\n", 3, "upstream.timeuot",
                      "one of url, connect_timeout"));
  EXPECT_TRUE(FailsAt(WithUpstream("storage:\n  etcd:\n    endpoint: [a]\n"), 4,
                      "storage.etcd.endpoint", "unknown key"));
  EXPECT_TRUE(FailsAt(WithUpstream("log: {level: info, format: json}\n"), 2, "log.format"));
}

TEST(LoadErrorsTest, DuplicateKey) {
  EXPECT_TRUE(FailsAt(WithUpstream("threads: 1\nthreads: 2\n"), 3, "threads", "duplicate key"));
}

TEST(LoadErrorsTest, NonScalarKey) {
  std::string message = ErrorOf(WithUpstream("? [a, b]\n: 1\n"));
  EXPECT_EQ(message, "test.yaml:2: has a key that is a list (expected plain key names)");
  EXPECT_TRUE(
      FailsAt(WithUpstream("log:\n  ? {a: b}\n  : 1\n"), 3, "log", "key that is a mapping"));
}

TEST(LoadErrorsTest, WrongTypeForThreads) {
  EXPECT_TRUE(FailsAt(WithUpstream("threads: abc\n"), 2, "threads", "'abc' is not a whole number"));
  EXPECT_TRUE(FailsAt(WithUpstream("threads: -1\n"), 2, "threads", "not a whole number"));
  EXPECT_TRUE(FailsAt(WithUpstream("threads: 2.5\n"), 2, "threads", "not a whole number"));
  EXPECT_TRUE(FailsAt(WithUpstream("threads: [1]\n"), 2, "threads", "is a list"));
  EXPECT_TRUE(FailsAt(WithUpstream("threads:\n"), 2, "threads", "empty (no value)"));
}

TEST(LoadErrorsTest, ThreadsOutOfRange) {
  EXPECT_TRUE(FailsAt(WithUpstream("threads: 1025\n"), 2, "threads", "from 0 to 1024"));
  EXPECT_TRUE(
      FailsAt(WithUpstream("threads: 99999999999999999999999\n"), 2, "threads", "too large"));
}

TEST(LoadErrorsTest, WrongTypeForSections) {
  EXPECT_TRUE(FailsAt(WithUpstream("routes: {}\n"), 2, "routes", "is a mapping (expected a list"));
  EXPECT_TRUE(FailsAt(WithUpstream("fencing: [a]\n"), 2, "fencing", "expected a mapping"));
  EXPECT_TRUE(FailsAt(WithUpstream("\nlimits: 5\n"), 3, "limits", "the value '5'"));
  EXPECT_TRUE(FailsAt(WithUpstream("admin:\n"), 2, "admin", "empty (no value)"));
  EXPECT_TRUE(FailsAt("upstream: http://h\n", 1, "upstream", "expected a mapping"));
}

TEST(LoadErrorsTest, WrongTypeForBooleans) {
  EXPECT_TRUE(FailsAt(WithUpstream("fencing:\n  forward_token: maybe\n"), 3,
                      "fencing.forward_token",
                      "'maybe' is not a boolean (expected true or false)"));
  EXPECT_TRUE(
      FailsAt(WithUpstream("log:\n  access_log: yes\n"), 3, "log.access_log", "not a boolean"));
}

TEST(LoadErrorsTest, WrongTypeForStrings) {
  EXPECT_TRUE(
      FailsAt(WithUpstream("admin:\n  token: {a: b}\n"), 3, "admin.token", "expected a string"));
  EXPECT_TRUE(FailsAt(WithUpstream("storage:\n  etcd:\n    endpoints: \"http://e:2379\"\n"), 4,
                      "storage.etcd.endpoints", "expected a non-empty list"));
  EXPECT_TRUE(FailsAt(WithUpstream("storage:\n  etcd:\n    endpoints: [\"http://a:2379\", [b]]\n"),
                      4, "storage.etcd.endpoints[1]", "is a list"));
}

TEST(LoadErrorsTest, BadDurations) {
  EXPECT_TRUE(FailsAt("upstream:\n  url: http://h\n  timeout: 10\n", 3, "upstream.timeout",
                      "'10' is not a duration"));
  EXPECT_TRUE(FailsAt("upstream:\n  url: http://h\n  connect_timeout: 1.5s\n", 3,
                      "upstream.connect_timeout", "not a duration"));
  EXPECT_TRUE(FailsAt(WithUpstream("limits:\n  max_body_bytes: 1\n  idle_timeout: -5s\n"), 4,
                      "limits.idle_timeout", "not a duration"));
  EXPECT_TRUE(FailsAt(WithUpstream("limits: {header_timeout: 10 s}\n"), 2, "limits.header_timeout",
                      "not a duration"));
}

TEST(LoadErrorsTest, ZeroTimeouts) {
  EXPECT_TRUE(FailsAt(WithUpstream("limits:\n  header_timeout: 0s\n"), 3, "limits.header_timeout",
                      "'0s' is zero (expected a positive duration"));
  EXPECT_TRUE(
      FailsAt("upstream:\n  timeout: 0ms\n  url: http://h\n", 2, "upstream.timeout", "is zero"));
}

TEST(LoadErrorsTest, LimitsMustBePositive) {
  EXPECT_TRUE(FailsAt(WithUpstream("limits:\n  max_header_bytes: 0\n"), 3,
                      "limits.max_header_bytes", "out of range"));
  EXPECT_TRUE(FailsAt(WithUpstream("limits:\n  max_connections: many\n"), 3,
                      "limits.max_connections", "not a whole number"));
}

TEST(LoadErrorsTest, MissingUpstreamSection) {
  EXPECT_TRUE(FailsAt("\nlisten: \"127.0.0.1:1\"\n", 2, "upstream.url", "is missing"));
}

TEST(LoadErrorsTest, MissingUpstreamUrl) {
  EXPECT_TRUE(FailsAt("threads: 1\nupstream:\n  timeout: 5s\n", 2, "upstream.url", "is missing"));
}

TEST(LoadErrorsTest, UpstreamUrlNotHttp) {
  EXPECT_TRUE(FailsAt("upstream:\n  url: ftp://h\n", 2, "upstream.url", "scheme 'ftp'"));
  EXPECT_TRUE(FailsAt("upstream:\n  url: \"\"\n", 2, "upstream.url", "is empty"));
  EXPECT_TRUE(FailsAt("upstream:\n  url: \"not a url\"\n", 2, "upstream.url", "is not a URL"));
  EXPECT_TRUE(FailsAt("upstream:\n  url: 127.0.0.1:9000\n", 2, "upstream.url"));
}

TEST(LoadErrorsTest, UpstreamUrlParts) {
  EXPECT_TRUE(FailsAt("upstream:\n  url: http://u:p@h/\n", 2, "upstream.url", "user info"));
  EXPECT_TRUE(FailsAt("upstream:\n  url: http://h/?a=1\n", 2, "upstream.url", "query"));
  EXPECT_TRUE(FailsAt("upstream:\n  url: http://h/#x\n", 2, "upstream.url", "fragment"));
  EXPECT_TRUE(FailsAt("upstream:\n  url: http:///path\n", 2, "upstream.url", "no usable host"));
  EXPECT_TRUE(FailsAt("upstream:\n  url: http:/path\n", 2, "upstream.url", "no usable host"));
  EXPECT_TRUE(FailsAt("upstream:\n  url: http://h:0/\n", 2, "upstream.url", "port '0'"));
  EXPECT_TRUE(FailsAt("upstream:\n  url: http://h:70000/\n", 2, "upstream.url", "port '70000'"));
}

// yaml-cpp 0.7's LoadAll never returns on a stray ',' (it allocates empty
// documents until the OOM killer comes): "fencegate --check" must still
// exit 2 on such a file, not hang (a fuzz_config case).
TEST(LoadErrorsTest, StrayCommaIsASyntaxErrorNotAHang) {
  EXPECT_EQ(ErrorOf(","), "test.yaml:1: YAML syntax error: unexpected ','");
  EXPECT_EQ(ErrorOf(",,,,\nr aU\n"), "test.yaml:1: YAML syntax error: unexpected ','");
  EXPECT_EQ(ErrorOf("[1, 2]\n,\n"), "test.yaml:2: YAML syntax error: unexpected ','");
  EXPECT_EQ(ErrorOf(WithUpstream("---\n,\n")), "test.yaml:3: YAML syntax error: unexpected ','");
}

// Boost.URL 1.81 parses "http://h:9)00" as port 9 and path ")00": taken as
// the base path, "--check" would say OK and every forwarded request line
// would be ")00/objects/a" (a fuzz_config case).
TEST(LoadErrorsTest, UpstreamUrlPathMustStartWithSlash) {
  EXPECT_TRUE(FailsAt("upstream:\n  url: \"http://127.0.0.1:9)00\"\n", 2, "upstream.url",
                      "the path must start with '/'"));
  EXPECT_TRUE(FailsAt("upstream:\n  url: http://h:8080x/api\n", 2, "upstream.url",
                      "the path must start with '/'"));
}

TEST(LoadErrorsTest, UnparseableListenAddresses) {
  EXPECT_TRUE(
      FailsAt(WithUpstream("listen: \"8080\"\n"), 2, "listen", "'8080' is not a listen address"));
  EXPECT_TRUE(FailsAt(WithUpstream("listen: \"\"\n"), 2, "listen", "not a listen address"));
  EXPECT_TRUE(FailsAt(WithUpstream("admin:\n  token: t\n  listen: \"::1:9901\"\n"), 4,
                      "admin.listen", "not a listen address"));
  EXPECT_TRUE(FailsAt(WithUpstream("locks:\n  listen: \"example.com:1\"\n"), 3, "locks.listen",
                      "or \"\" to turn it off"));
}

TEST(LoadErrorsTest, LocksMaxTtlMustBeAPositiveDuration) {
  EXPECT_TRUE(FailsAt(WithUpstream("locks:\n  max_ttl: 0s\n"), 3, "locks.max_ttl"));
  EXPECT_TRUE(FailsAt(WithUpstream("locks:\n  max_ttl: 10\n"), 3, "locks.max_ttl"));
  EXPECT_TRUE(FailsAt(WithUpstream("locks: {max_ttl: soon}\n"), 2, "locks.max_ttl"));
}

TEST(LoadErrorsTest, ListenersMustNotShareAnAddress) {
  EXPECT_TRUE(FailsAt(WithUpstream("listen: \"127.0.0.1:9901\"\n"), 2, "listen",
                      "also used by admin.listen"));
  EXPECT_TRUE(
      FailsAt(WithUpstream("listen: \"127.0.0.1:7000\"\nlocks: {listen: \"127.0.0.1:7000\"}\n"), 3,
              "locks.listen", "also used by listen"));
  // Port 0 never conflicts.
  EXPECT_EQ(ErrorOf(WithUpstream("listen: \"127.0.0.1:0\"\nadmin: {listen: \"127.0.0.1:0\"}\n")),
            "");
}

TEST(LoadErrorsTest, FencingTokenHeaderMustBeAToken) {
  EXPECT_TRUE(FailsAt(WithUpstream("fencing:\n  token_header: \"Fencing Token\"\n"), 3,
                      "fencing.token_header", "not a valid header name"));
  EXPECT_TRUE(FailsAt(WithUpstream("fencing:\n  token_header: \"\"\n"), 3, "fencing.token_header",
                      "not a valid header name"));
}

TEST(LoadErrorsTest, StorageChoices) {
  EXPECT_TRUE(FailsAt(WithUpstream("storage:\n  engine: leveldb\n"), 3, "storage.engine",
                      "'leveldb' is not allowed (expected rocksdb or etcd)"));
  EXPECT_TRUE(FailsAt(WithUpstream("storage:\n  durability: fsync\n"), 3, "storage.durability",
                      "sync or async"));
  EXPECT_TRUE(FailsAt(WithUpstream("storage:\n  path: \"\"\n"), 3, "storage.path", "is empty"));
  EXPECT_TRUE(FailsAt(WithUpstream("storage:\n  etcd:\n    endpoints: []\n"), 4,
                      "storage.etcd.endpoints", "empty list"));
}

// A field that would do nothing is refused, not ignored: the etcd engine
// has no durability to choose, whichever line comes first.
TEST(LoadErrorsTest, DurabilityIsRefusedWithTheEtcdEngine) {
  for (std::string_view value : {"async", "sync"}) {
    EXPECT_TRUE(FailsAt(WithUpstream("storage:\n  engine: etcd\n  durability: " +
                                     std::string(value) + "\n"),
                        4, "storage.durability",
                        "is set, but storage.engine is etcd, which does not use it"))
        << value;
  }
  EXPECT_TRUE(FailsAt(WithUpstream("storage:\n  durability: async\n  engine: etcd\n"), 3,
                      "storage.durability", "no durability with engine: etcd"));
  // Left out it is the default; with rocksdb both values stand.
  EXPECT_EQ(testing::MustLoad(WithUpstream("storage:\n  engine: etcd\n")).storage.engine, "etcd");
  EXPECT_EQ(testing::MustLoad(WithUpstream("storage:\n  engine: rocksdb\n  durability: async\n"))
                .storage.durability,
            Durability::kAsync);
}

TEST(LoadErrorsTest, EtcdCredentialsComeInPairsAndTheTimeoutHasAUnit) {
  EXPECT_TRUE(FailsAt(WithUpstream("storage:\n  etcd:\n    username: fg\n"), 4,
                      "storage.etcd.username",
                      "is set without password_file (expected both username and password_file, "
                      "or neither)"));
  EXPECT_TRUE(FailsAt(WithUpstream("storage:\n  etcd:\n    password_file: /run/secret\n"), 4,
                      "storage.etcd.password_file", "is set without username"));
  EXPECT_TRUE(FailsAt(WithUpstream("storage:\n  etcd:\n    timeout: 2\n"), 4,
                      "storage.etcd.timeout", "is not a duration"));
  for (const char* bad : {"0s", "soon", "\"\"", "[1s]"}) {
    EXPECT_TRUE(FailsAt(WithUpstream(std::string("storage:\n  etcd:\n    forward_within: ") +
                                     bad + "\n"),
                        4, "storage.etcd.forward_within", "off, or a positive duration"))
        << bad;
  }
  EXPECT_TRUE(FailsAt(WithUpstream("storage:\n  etcd:\n    username: \"\"\n"), 4,
                      "storage.etcd.username", "is empty"));
  // storage.etcd.ownership: each error names its field, whatever the order.
  const std::string own = "storage:\n  etcd:\n    ownership:\n";
  EXPECT_TRUE(FailsAt(WithUpstream(own + "      lease_ttl: 2500ms\n"), 5,
                      "storage.etcd.ownership.lease_ttl", "whole number of seconds"));
  EXPECT_TRUE(FailsAt(WithUpstream(own + "      margin: 3s\n      lease_ttl: 5s\n"), 5,
                      "storage.etcd.ownership.margin", "below half of lease_ttl"));
  EXPECT_TRUE(FailsAt(WithUpstream(own + "      lease_ttl: 2s\n"), 5,
                      "storage.etcd.ownership.lease_ttl", "below half of lease_ttl"));
  EXPECT_TRUE(FailsAt(WithUpstream(own + "      wait: 0s\n"), 5,
                      "storage.etcd.ownership.wait", "positive duration"));
  EXPECT_TRUE(FailsAt(WithUpstream(own + "      wait: 6s\n"), 4, "storage.etcd.ownership",
                      "longer than storage.etcd.decision_timeout"));
  Config c = testing::MustLoad(WithUpstream("storage:\n  etcd:\n    timeout: 500ms\n    username: fg\n"
                                   "    password_file: /run/secret\n"));
  EXPECT_EQ(c.storage.etcd.timeout, std::chrono::milliseconds(500));
  EXPECT_EQ(c.storage.etcd.username, "fg");
  EXPECT_EQ(c.storage.etcd.password_file.path, "/run/secret");
  EXPECT_EQ(c.storage.etcd.password_file.line, 6);
}

TEST(LoadErrorsTest, EtcdMaxBatchIsOneToForty) {
  for (const char* bad : {"0s", "5", "later"}) {
    EXPECT_TRUE(FailsAt(WithUpstream(std::string("storage:\n  etcd:\n    decision_timeout: ") +
                                     bad + "\n"),
                        4, "storage.etcd.decision_timeout", ""))
        << bad;
  }
  EXPECT_EQ(testing::MustLoad(WithUpstream("storage:\n  etcd:\n    decision_timeout: 750ms\n"))
                .storage.etcd.decision_timeout,
            Duration(750));
  EXPECT_TRUE(FailsAt(WithUpstream("storage:\n  etcd:\n    max_batch: 0\n"), 4,
                      "storage.etcd.max_batch",
                      "'0' is out of range (expected a whole number from 1 to 40)"));
  EXPECT_TRUE(FailsAt(WithUpstream("storage:\n  engine: etcd\n  etcd:\n    prefix: p/\n"
                                   "    max_batch: 41\n"),
                      6, "storage.etcd.max_batch", "'41' is out of range"));
  EXPECT_TRUE(FailsAt(WithUpstream("storage:\n  etcd:\n    max_batch: many\n"), 4,
                      "storage.etcd.max_batch", "'many' is not a whole number"));
  EXPECT_EQ(testing::MustLoad(WithUpstream("storage:\n  etcd:\n    max_batch: 1\n"))
                .storage.etcd.max_batch,
            1u);
  EXPECT_EQ(testing::MustLoad(WithUpstream("storage:\n  etcd:\n    max_batch: 40\n"))
                .storage.etcd.max_batch,
            40u);
}

TEST(LoadErrorsTest, LogLevel) {
  EXPECT_TRUE(FailsAt(WithUpstream("log:\n  level: verbose\n"), 3, "log.level",
                      "trace, debug, info, warn, error, critical or off"));
  EXPECT_TRUE(FailsAt(WithUpstream("log:\n  level: INFO\n"), 3, "log.level", "not allowed"));
}

TEST(LoadErrorsTest, YamlSyntaxErrorNamesFileAndLine) {
  std::string message = ErrorOf(WithUpstream("threads: [1, 2\nlisten: x\n"));
  EXPECT_EQ(message.rfind("test.yaml:3: YAML syntax error: ", 0), 0u) << message;
  message = ErrorOf("upstream:\n  url: http://h: x\n");
  EXPECT_EQ(message, "test.yaml:2: YAML syntax error: illegal map value");
  message = ErrorOf("upstream:\n  url: *undefined_anchor\n");
  EXPECT_EQ(message.rfind("test.yaml:2: YAML syntax error: ", 0), 0u) << message;
}

TEST(LoadErrorsTest, EmptyDocumentNamesTheFile) {
  for (const char* text : {"", "\n\n", "# only a comment\n", "---\n", "~\n"}) {
    std::string message = ErrorOf(text);
    EXPECT_EQ(message.rfind("test.yaml: the file is empty", 0), 0u) << message;
  }
}

TEST(LoadErrorsTest, DocumentMustBeAMapping) {
  std::string message = ErrorOf("\n- upstream\n");
  EXPECT_EQ(message.rfind("test.yaml:2: the document is a list", 0), 0u) << message;
  message = ErrorOf("just text\n");
  EXPECT_EQ(message.rfind("test.yaml:1: the document is the value 'just text'", 0), 0u) << message;
}

TEST(LoadErrorsTest, OnlyOneDocument) {
  std::string message = ErrorOf(WithUpstream("---\nthreads: 2\n"));
  EXPECT_EQ(message.rfind("test.yaml:3: a second YAML document", 0), 0u) << message;
}

TEST(LoadErrorsTest, UnreadableFileNamesTheFile) {
  LoadResult result = Load("/nonexistent/fencegate.yaml");
  const auto* error = std::get_if<ConfigError>(&result);
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(error->message.rfind("/nonexistent/fencegate.yaml: cannot read", 0), 0u)
      << error->message;
  result = Load("/tmp");
  error = std::get_if<ConfigError>(&result);
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(error->message, "/tmp: cannot read: is a directory");
}

TEST(LoadErrorsTest, MessageUsesTheGivenName) {
  LoadResult result = LoadFromString("threads: x\n", "/etc/fencegate/prod.yaml");
  const auto* error = std::get_if<ConfigError>(&result);
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(error->message.rfind("/etc/fencegate/prod.yaml:1: field 'threads': ", 0), 0u)
      << error->message;
}

}  // namespace
}  // namespace fencegate::config
