#pragma once
// The Config struct: every field of docs/contract.md, "Configuration", with its
// documented default. Load() reads YAML with yaml-cpp and validates everything;
// errors name the file, the line and the dotted field ("routes[1].mode").
// Components receive an immutable std::shared_ptr<const Config>.
//
// Fields marked "derived" (endpoints, upstream host/port/base_path) are
// filled by Load() only; a Config built by hand must set them itself.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace fencegate::config {

using Duration = std::chrono::milliseconds;

// A parsed listen address: "127.0.0.1:8080", "[::1]:8080", "0.0.0.0:0".
// Port 0 asks the kernel for a free port. Host must be a literal IPv4/IPv6
// address or "localhost".
struct Endpoint {
  std::string host;   // without brackets, e.g. "::1"
  uint16_t port = 0;
  std::string ToString() const;  // "[::1]:8080" / "127.0.0.1:8080"

  bool operator==(const Endpoint&) const = default;
};

enum class TlsVersion { kTls12, kTls13 };
std::string_view ToString(TlsVersion version);  // "1.2" | "1.3"

// A file that the config names, with the line that names it. Such files are
// read after Load() (the TLS contexts, tls/), whose errors still name the
// file, the line and the field. Relative paths are relative to the working
// directory, as storage.path is.
struct FileRef {
  std::string path;  // "" = not set
  int line = 0;      // 0 = not in the file

  bool empty() const { return path.empty(); }
  bool operator==(const FileRef&) const = default;
};

// `tls:` at the root: TLS on the client listener. Section absent = plain HTTP.
struct ListenerTlsConfig {
  bool enabled = false;            // the section is present
  FileRef cert_file;               // required: certificate chain, PEM, the server's first
  FileRef key_file;                // required: its private key, PEM, not encrypted
  FileRef client_ca_file;          // "" = no client certificates; else required from every
                                   // client and verified against these CAs (mTLS)
  TlsVersion min_version = TlsVersion::kTls12;
  int line = 0;                    // line of the section

  bool operator==(const ListenerTlsConfig&) const = default;
};

// A TLS client (upstream.tls, storage.etcd.tls). Only used with https URLs.
struct ClientTlsConfig {
  bool present = false;            // the section is in the file
  FileRef ca_file;                 // "" = the system trust store
  bool verify = true;              // false: no certificate check at all (warned at start)
  std::string server_name;         // SNI and the name verified; "" = the URL's host
  FileRef cert_file;               // client certificate (chain, PEM); with key_file, or neither
  FileRef key_file;
  TlsVersion min_version = TlsVersion::kTls12;
  int line = 0;                    // line of the section

  bool operator==(const ClientTlsConfig&) const = default;
};

struct UpstreamConfig {
  std::string url;                     // required, e.g. "http://127.0.0.1:9000"
  // Derived from url by Load():
  bool https = false;                  // scheme https: TLS to the upstream (see tls)
  std::string host;                    // "127.0.0.1"
  uint16_t port = 80;                  // explicit port, else 80 for http, 443 for https
  std::string base_path;               // url path without trailing '/', "" for root
  ClientTlsConfig tls;                 // upstream.tls; an error unless the url is https
  Duration connect_timeout{1000};      // default 1s
  Duration timeout{30000};             // default 30s: whole upstream exchange
  uint32_t max_idle_connections = 64;  // idle keep-alive connections kept

  bool operator==(const UpstreamConfig&) const = default;
};

struct FencingConfig {
  std::string token_header = "Fencing-Token";
  bool forward_token = true;  // pass the token header on to the backend

  bool operator==(const FencingConfig&) const = default;
};

enum class RouteMode { kEnforce, kShadow, kOff };
std::string_view ToString(RouteMode mode);  // "enforce" | "shadow" | "off"

// The methods of the IANA HTTP Method Registry, upper-case: the methods
// fencegate knows.
inline constexpr std::string_view kKnownMethods[] = {
    "ACL",        "BASELINE-CONTROL", "BIND",     "CHECKIN",      "CHECKOUT",    "CONNECT",
    "COPY",       "DELETE",           "GET",      "HEAD",         "LABEL",       "LINK",
    "LOCK",       "MERGE",            "MKACTIVITY", "MKCALENDAR", "MKCOL",       "MKREDIRECTREF",
    "MKWORKSPACE", "MOVE",            "OPTIONS",  "ORDERPATCH",   "PATCH",       "POST",
    "PRI",        "PROPFIND",         "PROPPATCH", "PUT",         "QUERY",       "REBIND",
    "REPORT",     "SEARCH",           "TRACE",    "UNBIND",       "UNCHECKOUT",  "UNLINK",
    "UNLOCK",     "UPDATE",           "UPDATEREDIRECTREF", "VERSION-CONTROL",
};

// A route's `nesting:` (docs/contract.md, "Nested resources"): how its
// tokens order writes over the tree of paths.
enum class RouteNesting { kPerKey, kShared, kOff };
std::string_view ToString(RouteNesting nesting);  // "per_key" | "shared" | "off"

// The methods whose write may change every path below its own, when a
// route does not list its own `subtree_methods:` (and outside every route).
// A method fencegate does not know (not in the IANA registry) is one too.
inline constexpr std::string_view kDefaultSubtreeMethods[] = {"DELETE", "COPY", "MOVE", "PUT",
                                                              "LOCK"};

// A route's `idempotency:` mapping (docs/contract.md, "Idempotency keys").
enum class IdempotencyConcurrency { kConflict, kWait };
std::string_view ToString(IdempotencyConcurrency concurrent);  // "conflict" | "wait"

struct IdempotencyConfig {
  Duration window{0};                      // required: how long a finished request is remembered
  std::string header = "Idempotency-Key";  // the request header carrying the key
  bool required = false;                   // true: a write without the header is 400
  std::string scope;                       // key template scoping the key; "" = none
  IdempotencyConcurrency concurrent = IdempotencyConcurrency::kConflict;
  uint64_t max_response_bytes = 1048576;   // the most response body kept for replay
  // A reservation whose request never finished is released after this.
  // Default 60s, or the window when that is shorter.
  Duration in_flight_timeout{60000};
  int line = 0;                            // line of the route's idempotency field

  bool operator==(const IdempotencyConfig&) const = default;
};

struct RouteConfig {
  std::string name;          // default "route-<index>"
  std::string path_prefix;   // exactly one of path_prefix / path_regex
  std::string path_regex;    // ECMAScript regex matched against the canonical path
                             // (search from start); compiled by Load() to validate it
  // Upper-case. Empty (the default) = every method but GET, HEAD, OPTIONS
  // and TRACE, in any letter case; a list narrows that.
  std::vector<std::string> methods;
  std::string key = "{path}";  // template, validated by Load()
  RouteMode mode = RouteMode::kEnforce;
  // path_params: refuse (false: a ';' in a writing request's path is 400) |
  // keep (true: the parameters are part of the key).
  bool keep_path_params = false;
  bool case_insensitive = false;  // keys made from the lower-cased path
  std::optional<IdempotencyConfig> idempotency;  // nullopt = off (the default)
  RouteNesting nesting = RouteNesting::kPerKey;
  // Upper-case; nullopt = kDefaultSubtreeMethods. Methods fencegate does
  // not know are subtree writes whatever the list says.
  std::optional<std::vector<std::string>> subtree_methods;
  int line = 0;              // line of the route in the file, for messages

  bool operator==(const RouteConfig&) const = default;
};

enum class Durability { kSync, kAsync };
std::string_view ToString(Durability durability);  // "sync" | "async"

// storage.etcd.ownership (docs/contract.md, "Replicas"): at most one
// replica forwards a key's writes at a time.
struct OwnershipConfig {
  bool enabled = true;
  Duration lease_ttl{5000};      // whole seconds, at least 2
  Duration margin{1000};         // above 0, below half of lease_ttl
  Duration release_after{30000}; // 0 or more
  // Above 0, at most decision_timeout; when not set, 3 s or decision_timeout
  // if that is shorter.
  Duration wait{3000};
  bool wait_set = false;
  std::string name;              // "" = host name and process id
  int line = 0;

  bool operator==(const OwnershipConfig&) const = default;
};

struct EtcdConfig {
  // http:// or https:// URLs, all with the same scheme. Read only with
  // storage.engine: etcd.
  std::vector<std::string> endpoints{"http://127.0.0.1:2379"};
  std::string prefix = "fencegate/";
  bool https = false;   // derived: the endpoints are https
  ClientTlsConfig tls;  // storage.etcd.tls; an error unless the endpoints are https
  // Each request to a member, connect included; then the next endpoint.
  Duration timeout{2000};
  // etcd's own authentication: a user, and the file holding its password
  // (never inline: the configuration file is often readable by more
  // people than the secret should be). Both or neither.
  std::string username;
  FileRef password_file;
  // A write that etcd accepted is forwarded within this time of its
  // check-and-advance, or refused (503 fence_expired): a replica paused or
  // held up longer may have lost its keys to another replica meanwhile.
  // Zero ("off"): no limit.
  Duration forward_within{1000};
  // How long a store call (a fenced write's check-and-advance, an
  // idempotency record's change) may take from the moment it is queued,
  // every etcd request and failover included; then 503 store_unavailable.
  Duration decision_timeout{5000};
  // Keys per transaction of the group commit, 1 to kMaxBatch; 1 = one
  // transaction per write.
  static constexpr unsigned kMaxBatch = 40;  // 3 operations a key; etcd allows 128 in one
  unsigned max_batch = kMaxBatch;
  OwnershipConfig ownership;

  bool operator==(const EtcdConfig&) const = default;
};

struct StorageConfig {
  std::string engine = "rocksdb";  // "rocksdb" | "etcd"
  std::string path = "./fencegate-data";  // relative paths: relative to the working directory
  Durability durability = Durability::kSync;
  EtcdConfig etcd;

  bool operator==(const StorageConfig&) const = default;
};

struct AdminConfig {
  std::string listen = "127.0.0.1:9901";  // "" = admin listener off
  std::optional<Endpoint> endpoint;        // derived; nullopt when off
  // The bearer token admin writes need; "" = admin writes disabled. Set
  // inline (admin.token), or from a file or an environment variable, which
  // ResolveSecrets() (config/secrets.h) reads into it: at most one of the
  // three is set.
  std::string token;
  FileRef token_file;                      // "" = not set
  std::string token_env;                   // a variable's name; "" = not set
  int token_env_line = 0;                  // line of token_env, for messages

  bool operator==(const AdminConfig&) const = default;
};

struct LocksConfig {
  std::string listen;                  // "" = lock service off
  std::optional<Endpoint> endpoint;    // derived
  Duration max_ttl{300000};            // default 5m: longest lease ttl and acquire wait

  bool operator==(const LocksConfig&) const = default;
};

struct LimitsConfig {
  uint64_t max_header_bytes = 16384;
  uint64_t max_body_bytes = 10485760;
  Duration header_timeout{10000};
  Duration idle_timeout{60000};
  uint64_t max_connections = 10000;
  Duration drain_timeout{10000};  // SIGTERM: longest wait for requests in flight
  uint64_t max_waiting_per_key = 1024;  // fenced writes queued behind one key; beyond: 503
  // Connections one client address may hold at once; beyond: closed at
  // once. 0 = no limit per client (max_connections still holds).
  uint64_t max_connections_per_client = 0;

  bool operator==(const LimitsConfig&) const = default;
};

// How the proxy tells the backend who the client is (X-Forwarded-For,
// X-Forwarded-Proto, Forwarded). trusted_hops = how many proxies in front of
// fencegate are trusted: 0 drops whatever the client sent in those headers
// and starts them afresh; N keeps the last N X-Forwarded-For entries (added
// by the trusted proxies) before appending the peer address.
struct ForwardingConfig {
  uint32_t trusted_hops = 0;
  bool operator==(const ForwardingConfig&) const = default;
};

// Where the logs go. A file is opened for appending and reopened on
// SIGUSR1 (logrotate); its directory must exist and be writable.
struct LogConfig {
  std::string level = "info";  // trace|debug|info|warn|error|critical|off
  FileRef file;                // the application log; "" = standard error
  bool access_log = true;      // one JSON line per request
  FileRef access_log_file;     // where those lines go; "" = standard error

  bool operator==(const LogConfig&) const = default;
};

struct Config {
  std::string source;                 // file name the config came from
  std::string listen = "127.0.0.1:8080";
  Endpoint endpoint;                  // derived from listen
  ListenerTlsConfig tls;              // TLS on the client listener (off by default)
  unsigned threads = 0;               // 0 = one per core
  UpstreamConfig upstream;
  FencingConfig fencing;
  std::vector<RouteConfig> routes;
  StorageConfig storage;
  AdminConfig admin;
  LocksConfig locks;
  LimitsConfig limits;
  ForwardingConfig forwarding;
  LogConfig log;

  bool operator==(const Config&) const = default;
};

struct ConfigError {
  std::string message;  // "FILE:LINE: field 'upstream.url': ..."
};

using LoadResult = std::variant<Config, ConfigError>;

// Reads and validates a YAML file. Never throws.
LoadResult Load(const std::string& path);
// Same, from text; `name` stands for the file name in messages.
LoadResult LoadFromString(std::string_view yaml, std::string_view name);

// "250ms", "10s", "5m", "24h", "1h30m" -> milliseconds. nullopt when malformed.
// Grammar: one or more DIGITS UNIT with UNIT in h, m, s, ms, units strictly
// largest first ("1h30m" yes, "30m1h" / "1s1s" no). No sign, spaces,
// fractions or bare numbers. "0s" parses (callers decide whether zero is
// allowed; Load() requires timeouts > 0). Values above about 292 years (what
// std::chrono::nanoseconds holds) are overflow -> nullopt.
std::optional<Duration> ParseDuration(std::string_view text);
// "127.0.0.1:8080", "[::1]:0", "localhost:80". nullopt when malformed.
// Host: dotted-quad IPv4, bracketed IPv6 (no zone), or exactly "localhost"
// (kept as the string "localhost"; the listener resolves it). Port: 1-5
// digits, 0..65535.
std::optional<Endpoint> ParseEndpoint(std::string_view text);

}  // namespace fencegate::config
