// Load(): YAML text -> validated Config (docs/contract.md, "Configuration").
// Every section has one reader function; all of them go through YamlReader so
// that unknown keys, wrong types and bad values stop the load with file, line
// and field.

#include "config/config.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <boost/url/parse.hpp>
#include <boost/url/url_view.hpp>
#include <cerrno>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <system_error>

#include "config/internal.h"
#include "config/routes.h"
#include "config/yaml_reader.h"

namespace fencegate::config {
namespace {

using internal::Field;
using internal::YamlReader;
using Keys = std::vector<YamlReader::Key>;

constexpr uint64_t kMaxThreads = 1024;
constexpr uint64_t kMaxU64 = std::numeric_limits<uint64_t>::max();

// Lines of the listen fields as found in the file (0 = default value).
struct ListenLines {
  int listen = 0;
  int admin = 0;
  int locks = 0;
};

// A handler that reads a positive duration into *out.
std::function<bool(const Field&)> DurationInto(YamlReader& r, Duration* out) {
  return [&r, out](const Field& v) { return r.PositiveDuration(v, out); };
}

bool ReadUpstreamUrl(YamlReader& r, const Field& f, UpstreamConfig* up) {
  static constexpr std::string_view kExpected =
      "an http or https URL with a host, e.g. http://127.0.0.1:9000 or https://backend:8443/base";
  std::string text;
  if (!r.NonEmptyString(f, kExpected, &text)) return false;
  auto parsed = boost::urls::parse_uri(text);
  if (!parsed) {
    return r.Fail(f, "'" + text + "' is not a URL: " + parsed.error().message(), kExpected);
  }
  const boost::urls::url_view& url = *parsed;
  const bool https = url.scheme_id() == boost::urls::scheme::https;
  if (!https && url.scheme_id() != boost::urls::scheme::http) {
    return r.Fail(f, "scheme '" + std::string(url.scheme()) + "' is not supported", kExpected);
  }
  if (url.has_userinfo()) return r.Fail(f, "must not contain user info ('user@')", kExpected);
  if (url.has_query()) return r.Fail(f, "must not contain a query ('?')", kExpected);
  if (url.has_fragment()) return r.Fail(f, "must not contain a fragment ('#')", kExpected);
  std::string host = url.host_address();
  bool host_ok = url.has_authority() && !host.empty() &&
                 url.host_type() != boost::urls::host_type::ipvfuture &&
                 url.encoded_host_address().find('%') == std::string_view::npos;
  if (!host_ok) return r.Fail(f, "'" + text + "' has no usable host", kExpected);

  uint16_t port = https ? 443 : 80;
  if (url.has_port() && !url.port().empty()) {
    std::optional<Endpoint> probe = ParseEndpoint("0.0.0.0:" + std::string(url.port()));
    if (!probe || probe->port == 0) {
      return r.Fail(f, "port '" + std::string(url.port()) + "' is not in 1..65535", kExpected);
    }
    port = probe->port;
  }
  std::string base_path(url.encoded_path());
  // Boost.URL 1.81 takes "http://h:80x" as port 80 and path "x"; RFC 3986
  // wants the path after an authority to be empty or to start with '/'.
  if (!base_path.empty() && base_path.front() != '/') {
    return r.Fail(f, "'" + text + "' is not a URL: after the host and port, the path must start "
                  "with '/'", kExpected);
  }
  while (!base_path.empty() && base_path.back() == '/') base_path.pop_back();

  up->url = std::move(text);
  up->https = https;
  up->host = std::move(host);
  up->port = port;
  up->base_path = std::move(base_path);
  return true;
}

// ---------------------------------------------------------------------------
// TLS sections. Files are only named here; tls/ reads them (--check too).

bool ReadTlsVersion(YamlReader& r, const Field& f, TlsVersion* out) {
  std::string value;
  if (!r.Choice(f, {"1.2", "1.3"}, &value)) return false;
  *out = value == "1.2" ? TlsVersion::kTls12 : TlsVersion::kTls13;
  return true;
}

std::function<bool(const Field&)> FileInto(YamlReader& r, FileRef* out) {
  return [&r, out](const Field& v) {
    std::string path;
    if (!r.String(v, &path)) return false;
    if (path.find('\0') != std::string::npos) {
      return r.Fail(v, "contains a NUL byte", "a file path");
    }
    *out = FileRef{std::move(path), v.line};
    return true;
  };
}

// A DNS name or an IP address: what SNI and the certificate check use.
bool IsServerName(std::string_view name) {
  if (name.empty() || name.size() > 253) return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '.' || c == ':';
    if (!ok) return false;
  }
  return true;
}

// upstream.tls and storage.etcd.tls: a TLS client's settings.
bool ReadClientTls(YamlReader& r, const Field& f, ClientTlsConfig* tls) {
  tls->present = true;
  tls->line = f.line;
  bool ok = r.Map(f, Keys{
      {"ca_file", FileInto(r, &tls->ca_file)},
      {"verify", [&](const Field& v) { return r.Bool(v, &tls->verify); }},
      {"server_name", [&](const Field& v) {
         std::string name;
         if (!r.String(v, &name)) return false;
         if (!name.empty() && !IsServerName(name)) {
           return r.Fail(v, "'" + name + "' is not a host name",
                         "a DNS name or IP address such as backend.internal, or \"\" for the "
                         "URL's host");
         }
         tls->server_name = std::move(name);
         return true;
       }},
      {"cert_file", FileInto(r, &tls->cert_file)},
      {"key_file", FileInto(r, &tls->key_file)},
      {"min_version", [&](const Field& v) { return ReadTlsVersion(r, v, &tls->min_version); }},
  });
  if (!ok) return false;
  static constexpr std::string_view kPair =
      "both cert_file and key_file for a client certificate, or neither";
  if (tls->cert_file.empty() != tls->key_file.empty()) {
    const bool cert = !tls->cert_file.empty();
    const FileRef& set = cert ? tls->cert_file : tls->key_file;
    return r.Fail(f.Child(f.node, cert ? "cert_file" : "key_file", set.line),
                  cert ? "is set without key_file" : "is set without cert_file", kPair);
  }
  if (!tls->verify && !tls->ca_file.empty()) {
    return r.Fail(f.Child(f.node, "ca_file", tls->ca_file.line),
                  "is set, but verify is false, so no certificate would be checked against it",
                  "verify: true (the default) with a ca_file, or no ca_file");
  }
  return true;
}

// `tls:` at the root: the client listener's certificate and key.
bool ReadListenerTls(YamlReader& r, const Field& f, ListenerTlsConfig* tls) {
  tls->enabled = true;
  tls->line = f.line;
  bool ok = r.Map(f, Keys{
      {"cert_file", FileInto(r, &tls->cert_file)},
      {"key_file", FileInto(r, &tls->key_file)},
      {"client_ca_file", FileInto(r, &tls->client_ca_file)},
      {"min_version", [&](const Field& v) { return ReadTlsVersion(r, v, &tls->min_version); }},
  });
  if (!ok) return false;
  struct Required {
    const char* name;
    const FileRef& file;
    const char* expected;
  };
  for (const Required& req :
       {Required{"cert_file", tls->cert_file, "the listener's certificate chain, a PEM file"},
        Required{"key_file", tls->key_file, "the private key of cert_file, a PEM file"}}) {
    if (!req.file.empty()) continue;
    Field field = f.Child(f.node, req.name, req.file.line > 0 ? req.file.line : f.line);
    return r.Fail(field, req.file.line > 0 ? "is empty" : "is missing", req.expected);
  }
  return true;
}

bool ReadUpstream(YamlReader& r, const Field& f, UpstreamConfig* up) {
  bool has_url = false;
  bool ok = r.Map(f, Keys{
      {"url", [&](const Field& v) { return has_url = ReadUpstreamUrl(r, v, up); }},
      {"connect_timeout", DurationInto(r, &up->connect_timeout)},
      {"timeout", DurationInto(r, &up->timeout)},
      {"max_idle_connections", [&](const Field& v) {
         uint64_t n = 0;
         if (!r.Unsigned(v, 0, std::numeric_limits<uint32_t>::max(), &n)) return false;
         up->max_idle_connections = static_cast<uint32_t>(n);
         return true;
       }},
      {"tls", [&](const Field& v) { return ReadClientTls(r, v, &up->tls); }},
  });
  if (ok && !has_url) {
    return r.Fail(f.Child(f.node, "url", f.line), "is missing",
                  "the backend's URL, e.g. url: http://127.0.0.1:9000");
  }
  if (ok && up->tls.present && !up->https) {
    return r.Fail(f.Child(f.node, "tls", up->tls.line),
                  "is set, but upstream.url '" + up->url + "' is not https, so it would not be used",
                  "an https:// url (which turns TLS on), or no tls section");
  }
  return ok;
}

bool ReadFencing(YamlReader& r, const Field& f, FencingConfig* fencing) {
  return r.Map(f, Keys{
      {"token_header", [&](const Field& v) {
         std::string name;
         if (!r.String(v, &name)) return false;
         if (!internal::IsHttpToken(name)) {
           return r.Fail(v, "'" + name + "' is not a valid header name",
                         "an HTTP token such as Fencing-Token");
         }
         fencing->token_header = std::move(name);
         return true;
       }},
      {"forward_token", [&](const Field& v) { return r.Bool(v, &fencing->forward_token); }},
  });
}

bool ReadStorage(YamlReader& r, const Field& f, StorageConfig* storage) {
  auto read_etcd = [&](const Field& v) {
    EtcdConfig& etcd = storage->etcd;
    bool ok = r.Map(v, Keys{
        {"endpoints", [&](const Field& list) {
           static constexpr std::string_view kExpected =
               "a non-empty list of etcd URLs such as [\"http://127.0.0.1:2379\"]";
           static constexpr std::string_view kUrl =
               "an http:// or https:// URL with a host, e.g. https://10.0.0.1:2379";
           std::vector<std::string> endpoints;
           std::optional<bool> https;
           bool ok = r.Sequence(list, kExpected, [&](const Field& item) {
             std::string url;
             if (!r.NonEmptyString(item, kExpected, &url)) return false;
             auto parsed = boost::urls::parse_uri(url);
             bool is_https = parsed && parsed->scheme_id() == boost::urls::scheme::https;
             bool is_http = parsed && parsed->scheme_id() == boost::urls::scheme::http;
             if ((!is_http && !is_https) || parsed->host_address().empty()) {
               return r.Fail(item, "'" + url + "' is not an etcd URL", kUrl);
             }
             if (https && *https != is_https) {
               return r.Fail(item, "mixes http and https endpoints",
                             "the same scheme for every endpoint");
             }
             https = is_https;
             endpoints.push_back(std::move(url));
             return true;
           });
           if (!ok) return false;
           if (endpoints.empty()) return r.Fail(list, "is an empty list", kExpected);
           etcd.endpoints = std::move(endpoints);
           etcd.https = *https;
           return true;
         }},
        {"prefix", [&](const Field& p) { return r.String(p, &etcd.prefix); }},
        {"tls", [&](const Field& t) { return ReadClientTls(r, t, &etcd.tls); }},
    });
    if (ok && etcd.tls.present && !etcd.https) {
      return r.Fail(v.Child(v.node, "tls", etcd.tls.line),
                    "is set, but storage.etcd.endpoints are not https, so it would not be used",
                    "https:// endpoints (which turn TLS on), or no tls section");
    }
    return ok;
  };
  return r.Map(f, Keys{
      {"engine",
       [&](const Field& v) {
         if (!r.Choice(v, {"rocksdb", "etcd"}, &storage->engine)) return false;
         if (storage->engine == "etcd") {  // validated, refused until the engine exists
           return r.Fail(v, "the etcd engine is not built in this version", "rocksdb");
         }
         return true;
       }},
      {"path", [&](const Field& v) {
         return r.NonEmptyString(v, "a directory path such as ./fencegate-data", &storage->path);
       }},
      {"durability", [&](const Field& v) {
         std::string value;
         if (!r.Choice(v, {"sync", "async"}, &value)) return false;
         storage->durability = value == "sync" ? Durability::kSync : Durability::kAsync;
         return true;
       }},
      {"etcd", read_etcd},
  });
}

bool ReadLimits(YamlReader& r, const Field& f, LimitsConfig* limits) {
  auto positive = [&](uint64_t* out) {
    return [&r, out](const Field& v) { return r.Unsigned(v, 1, kMaxU64, out); };
  };
  return r.Map(f, Keys{
      {"max_header_bytes", positive(&limits->max_header_bytes)},
      {"max_body_bytes", positive(&limits->max_body_bytes)},
      {"header_timeout", DurationInto(r, &limits->header_timeout)},
      {"idle_timeout", DurationInto(r, &limits->idle_timeout)},
      {"max_connections", positive(&limits->max_connections)},
      {"drain_timeout", DurationInto(r, &limits->drain_timeout)},
      {"max_waiting_per_key", positive(&limits->max_waiting_per_key)},
      {"max_connections_per_client", [&r, limits](const Field& v) {
         return r.Unsigned(v, 0, kMaxU64, &limits->max_connections_per_client);
       }},
  });
}

bool ReadLog(YamlReader& r, const Field& f, LogConfig* log) {
  return r.Map(f, Keys{
      {"level", [&](const Field& v) {
         return r.Choice(v, {"trace", "debug", "info", "warn", "error", "critical", "off"},
                         &log->level);
       }},
      {"access_log", [&](const Field& v) { return r.Bool(v, &log->access_log); }},
  });
}

// Two listeners on the same non-zero host:port cannot both bind.
bool CheckListenConflicts(YamlReader& r, const Config& c, const ListenLines& lines) {
  struct Listener {
    const char* path;
    std::optional<Endpoint> endpoint;
    int line;
  };
  const Listener listeners[] = {{"listen", c.endpoint, lines.listen},
                                {"admin.listen", c.admin.endpoint, lines.admin},
                                {"locks.listen", c.locks.endpoint, lines.locks}};
  for (size_t i = 0; i < 3; ++i) {
    for (size_t j = i + 1; j < 3; ++j) {
      const auto& a = listeners[i];
      const auto& b = listeners[j];
      if (!a.endpoint || !b.endpoint || a.endpoint->port == 0 || !(*a.endpoint == *b.endpoint)) {
        continue;
      }
      const Listener& reported = b.line > 0 ? b : a;
      const Listener& other = b.line > 0 ? a : b;
      return r.Fail(Field{YAML::Node(), reported.path, reported.line},
                    "'" + reported.endpoint->ToString() + "' is also used by " + other.path,
                    "a distinct address for each listener, or port 0");
    }
  }
  return true;
}

bool ReadRoot(YamlReader& r, const Field& root, Config* c) {
  ListenLines lines;
  bool has_upstream = false;
  bool ok = r.Map(root, Keys{
      {"listen", [&](const Field& v) {
         lines.listen = v.line;
         std::optional<Endpoint> endpoint;
         if (!r.Listen(v, false, &c->listen, &endpoint)) return false;
         c->endpoint = *endpoint;
         return true;
       }},
      {"tls", [&](const Field& v) { return ReadListenerTls(r, v, &c->tls); }},
      {"threads", [&](const Field& v) {
         uint64_t n = 0;
         if (!r.Unsigned(v, 0, kMaxThreads, &n)) return false;
         c->threads = static_cast<unsigned>(n);
         return true;
       }},
      {"upstream", [&](const Field& v) { return has_upstream = ReadUpstream(r, v, &c->upstream); }},
      {"fencing", [&](const Field& v) { return ReadFencing(r, v, &c->fencing); }},
      {"routes", [&](const Field& v) { return internal::ReadRoutes(r, v, &c->routes); }},
      {"storage", [&](const Field& v) { return ReadStorage(r, v, &c->storage); }},
      {"admin", [&](const Field& v) {
         return r.Map(v, Keys{
             {"listen", [&](const Field& l) {
                lines.admin = l.line;
                return r.Listen(l, true, &c->admin.listen, &c->admin.endpoint);
              }},
             {"token", [&](const Field& t) { return r.String(t, &c->admin.token); }},
         });
       }},
      {"locks", [&](const Field& v) {
         return r.Map(v, Keys{
             {"listen", [&](const Field& l) {
                lines.locks = l.line;
                return r.Listen(l, true, &c->locks.listen, &c->locks.endpoint);
              }},
             {"max_ttl", DurationInto(r, &c->locks.max_ttl)},
         });
       }},
      {"limits", [&](const Field& v) { return ReadLimits(r, v, &c->limits); }},
      {"log", [&](const Field& v) { return ReadLog(r, v, &c->log); }},
      {"forwarding", [&](const Field& v) {
         return r.Map(v, Keys{
             {"trusted_hops", [&](const Field& h) {
                uint64_t n = 0;
                if (!r.Unsigned(h, 0, 64, &n)) return false;
                c->forwarding.trusted_hops = static_cast<uint32_t>(n);
                return true;
              }},
         });
       }},
  });
  if (!ok) return false;
  if (!has_upstream) {
    return r.Fail(Field{YAML::Node(), "upstream.url", root.line}, "is missing",
                  "an upstream section with the backend's URL, e.g. upstream: {url: "
                  "\"http://127.0.0.1:9000\"}");
  }
  return CheckListenConflicts(r, *c, lines);
}

// Endpoints derived from the documented default listen strings.
void DeriveDefaults(Config* c) {
  c->endpoint = *ParseEndpoint(c->listen);
  c->admin.endpoint = c->admin.listen.empty() ? std::nullopt : ParseEndpoint(c->admin.listen);
  c->locks.endpoint = c->locks.listen.empty() ? std::nullopt : ParseEndpoint(c->locks.listen);
}

// Walks the documents of `yaml` without building them. yaml-cpp 0.7's
// YAML::LoadAll never returns on a token that cannot start a node, such as a
// stray ',': it emits the same empty document again and again, allocating
// until the process is killed (https://github.com/jbeder/yaml-cpp/issues/1040,
// fixed in 0.8). Such a document starts where the previous one did; returns
// its mark, or nullopt when every document moves on. Throws YAML::Exception
// on syntax errors.
class DocumentStarts : public YAML::EventHandler {
 public:
  std::optional<YAML::Mark> stuck;
  std::optional<YAML::Mark> last;
  void OnDocumentStart(const YAML::Mark& mark) override {
    if (last && last->pos == mark.pos) stuck = mark;
    last = mark;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

std::optional<YAML::Mark> StuckDocument(const std::string& yaml) {
  std::istringstream in(yaml);
  YAML::Parser parser(in);
  DocumentStarts starts;
  while (!starts.stuck && parser.HandleNextDocument(starts)) {
  }
  return starts.stuck;
}

LoadResult LoadChecked(std::string_view yaml, const std::string& name) {
  YamlReader reader(name);
  std::vector<YAML::Node> docs;
  try {
    const std::string text(yaml);
    if (std::optional<YAML::Mark> stuck = StuckDocument(text)) {
      const size_t pos = static_cast<size_t>(stuck->pos);
      std::string what = pos < text.size() ? "'" + text.substr(pos, 1) + "'" : "end of file";
      reader.FailDocument(stuck->line + 1, "YAML syntax error: unexpected " + what);
      return ConfigError{reader.error()};
    }
    docs = YAML::LoadAll(text);
  } catch (const YAML::Exception& e) {
    reader.FailDocument(e.mark.line >= 0 ? e.mark.line + 1 : 1, "YAML syntax error: " + e.msg);
    return ConfigError{reader.error()};
  }
  if (docs.empty() || docs[0].IsNull()) {
    return ConfigError{name +
                       ": the file is empty (expected a mapping with at least upstream.url)"};
  }
  if (docs.size() > 1) {
    reader.FailDocument(internal::LineOf(docs[1], 1),
                        "a second YAML document (expected exactly one document)");
    return ConfigError{reader.error()};
  }
  const YAML::Node& root = docs[0];
  if (!root.IsMap()) {
    std::string what = "the document is " + YamlReader::Describe(root) +
                       " (expected a mapping of configuration fields, with at least upstream.url)";
    reader.FailDocument(internal::LineOf(root, 1), what);
    return ConfigError{reader.error()};
  }
  Config config;
  config.source = name;
  DeriveDefaults(&config);
  if (!ReadRoot(reader, Field{root, "", internal::LineOf(root, 1)}, &config)) {
    return ConfigError{reader.error()};
  }
  return config;
}

}  // namespace

LoadResult LoadFromString(std::string_view yaml, std::string_view name) {
  std::string file(name);
  try {
    return LoadChecked(yaml, file);
  } catch (const std::exception& e) {
    return ConfigError{file + ": internal error while reading the configuration: " + e.what()};
  } catch (...) {
    return ConfigError{file + ": internal error while reading the configuration"};
  }
}

LoadResult Load(const std::string& path) {
  try {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) {
      return ConfigError{path + ": cannot read: is a directory"};
    }
    // std::generic_category().message(), unlike std::strerror(), is
    // thread-safe: a reload may load on another thread than the listeners'.
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      const int err = errno;
      return ConfigError{path + ": cannot read: " + std::generic_category().message(err)};
    }
    std::ostringstream text;
    text << in.rdbuf();
    if (in.bad()) {
      const int err = errno;
      return ConfigError{path + ": cannot read: " + std::generic_category().message(err)};
    }
    return LoadFromString(text.str(), path);
  } catch (const std::exception& e) {
    return ConfigError{path + ": cannot read: " + e.what()};
  }
}

}  // namespace fencegate::config
