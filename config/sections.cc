// The sections of the file other than routes and TLS: upstream, fencing,
// storage, limits and log.

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "config/internal.h"
#include "config/readers.h"

namespace fencegate::config::internal {
namespace {

constexpr uint64_t kMaxU64 = std::numeric_limits<uint64_t>::max();

}  // namespace

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

std::function<bool(const Field&)> DurationInto(YamlReader& r, Duration* out) {
  return [&r, out](const Field& v) { return r.PositiveDuration(v, out); };
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
         if (!IsHttpToken(name)) {
           return r.Fail(v, "'" + name + "' is not a valid header name",
                         "an HTTP token such as Fencing-Token");
         }
         fencing->token_header = std::move(name);
         return true;
       }},
      {"forward_token", [&](const Field& v) { return r.Bool(v, &fencing->forward_token); }},
  });
}

bool ReadOwnership(YamlReader& r, const Field& f, OwnershipConfig* o) {
  o->line = f.line;
  // Lines, not Fields: a YAML::Node assigned to another writes into the
  // document it refers to, under the map being read.
  int ttl_line = 0;
  int margin_line = 0;
  bool ok = r.Map(f, Keys{
      {"enabled", [&](const Field& e) { return r.Bool(e, &o->enabled); }},
      {"lease_ttl", [&](const Field& t) {
         ttl_line = t.line;
         if (!DurationInto(r, &o->lease_ttl)(t)) return false;
         if (o->lease_ttl.count() % 1000 != 0 || o->lease_ttl < Duration(2000)) {
           return r.Fail(t, "is not a whole number of seconds of at least 2 (etcd's leases "
                            "count in seconds)", "a duration such as 5s");
         }
         return true;
       }},
      {"margin", [&](const Field& m) {
         margin_line = m.line;
         return DurationInto(r, &o->margin)(m);
       }},
      {"release_after", DurationInto(r, &o->release_after)},
      {"wait", [&](const Field& w) {
         o->wait_set = true;
         if (!DurationInto(r, &o->wait)(w)) return false;
         if (o->wait.count() <= 0) return r.Fail(w, "is not above 0", "a duration such as 3s");
         return true;
       }},
      {"name", [&](const Field& n) { return r.NonEmptyString(n, "a replica's name", &o->name); }},
  });
  if (!ok) return false;
  if (o->margin.count() <= 0 || o->margin * 2 >= o->lease_ttl) {
    const bool margin_set = margin_line != 0;
    return r.Fail(f.Child(f.node, margin_set ? "margin" : "lease_ttl",
                          margin_set ? margin_line : ttl_line),
                  "leaves the margin (" + std::to_string(o->margin.count()) +
                      " ms) not above 0 and below half of lease_ttl (" +
                      std::to_string(o->lease_ttl.count()) + " ms)",
                  "a margin such as 1s with lease_ttl: 5s");
  }
  return true;
}

bool ReadStorage(YamlReader& r, const Field& f, StorageConfig* storage) {
  auto read_etcd = [&](const Field& v) {
    EtcdConfig& etcd = storage->etcd;
    int username_line = 0;
    bool ok = r.Map(v, Keys{
        {"endpoints", [&](const Field& list) { return ReadEtcdEndpoints(r, list, &etcd); }},
        {"prefix", [&](const Field& p) { return r.String(p, &etcd.prefix); }},
        {"tls", [&](const Field& t) { return ReadClientTls(r, t, &etcd.tls); }},
        {"timeout", DurationInto(r, &etcd.timeout)},
        {"decision_timeout", DurationInto(r, &etcd.decision_timeout)},
        {"username", [&](const Field& u) {
           username_line = u.line;
           return r.NonEmptyString(u, "an etcd user name", &etcd.username);
         }},
        {"password_file", FileInto(r, &etcd.password_file)},
        {"forward_within", [&](const Field& w) {
           static constexpr std::string_view kExpected =
               "off, or a positive duration below the front end's failover time, such as 1s";
           std::string text;
           if (!r.NonEmptyString(w, kExpected, &text)) return false;
           std::optional<Duration> within =
               text == "off" ? std::optional<Duration>(Duration::zero()) : ParseDuration(text);
           if (!within || (text != "off" && within->count() <= 0)) {
             return r.Fail(w, "'" + text + "' is neither off nor a positive duration", kExpected);
           }
           etcd.forward_within = *within;
           return true;
         }},
        {"max_batch", [&](const Field& m) {
           uint64_t n = 0;
           if (!r.Unsigned(m, 1, EtcdConfig::kMaxBatch, &n)) return false;
           etcd.max_batch = static_cast<unsigned>(n);
           return true;
         }},
        {"ownership", [&](const Field& o) { return ReadOwnership(r, o, &etcd.ownership); }},
    });
    if (ok && !etcd.ownership.wait_set) {
      etcd.ownership.wait = std::min(etcd.ownership.wait, etcd.decision_timeout);
    }
    if (ok && etcd.ownership.wait > etcd.decision_timeout) {
      return r.Fail(v.Child(v.node, "ownership", etcd.ownership.line),
                    "has a wait longer than storage.etcd.decision_timeout, which would cut it",
                    "storage.etcd.ownership.wait at most storage.etcd.decision_timeout");
    }
    if (ok && etcd.username.empty() != etcd.password_file.empty()) {
      const bool user = !etcd.username.empty();
      return r.Fail(v.Child(v.node, user ? "username" : "password_file",
                            user ? username_line : etcd.password_file.line),
                    user ? "is set without password_file" : "is set without username",
                    "both username and password_file, or neither");
    }
    if (ok && etcd.tls.present && !etcd.https) {
      return r.Fail(v.Child(v.node, "tls", etcd.tls.line),
                    "is set, but storage.etcd.endpoints are not https, so it would not be used",
                    "https:// endpoints (which turn TLS on), or no tls section");
    }
    return ok;
  };
  int durability_line = 0;
  bool ok = r.Map(f, Keys{
      {"engine",
       [&](const Field& v) {
         return r.Choice(v, {"rocksdb", "etcd"}, &storage->engine);
       }},
      {"path", [&](const Field& v) {
         return r.NonEmptyString(v, "a directory path such as ./fencegate-data", &storage->path);
       }},
      {"durability", [&](const Field& v) {
         durability_line = v.line;
         std::string value;
         if (!r.Choice(v, {"sync", "async"}, &value)) return false;
         storage->durability = value == "sync" ? Durability::kSync : Durability::kAsync;
         return true;
       }},
      {"etcd", read_etcd},
  });
  // The etcd engine has no such choice: etcd syncs every write on a quorum
  // of its members before it answers. `async` there would promise a speed
  // for a durability that is not traded away, `sync` a choice not made.
  if (ok && storage->engine == "etcd" && durability_line > 0) {
    return r.Fail(f.Child(f.node, "durability", durability_line),
                  "is set, but storage.engine is etcd, which does not use it (etcd syncs every "
                  "write on a quorum of its members)",
                  "no durability with engine: etcd");
  }
  return ok;
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
  bool ok = r.Map(f, Keys{
      {"level", [&](const Field& v) {
         return r.Choice(v, {"trace", "debug", "info", "warn", "error", "critical", "off"},
                         &log->level);
       }},
      {"file", FileInto(r, &log->file)},
      {"access_log", [&](const Field& v) { return r.Bool(v, &log->access_log); }},
      {"access_log_file", FileInto(r, &log->access_log_file)},
  });
  if (!ok) return false;
  // Two writers appending to one file would interleave their buffers.
  if (!log->file.empty() && log->file.path == log->access_log_file.path) {
    Field at = f;
    at.path = f.path + ".access_log_file";
    at.line = log->access_log_file.line;
    return r.Fail(at, "names the same file as log.file", "a file of its own");
  }
  return true;
}

}  // namespace fencegate::config::internal
