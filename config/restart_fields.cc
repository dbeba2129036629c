#include "config/restart_fields.h"

namespace fencegate::config {

namespace {

class Changes {
 public:
  // Notes `field` when its two values differ.
  template <typename T>
  void Compare(const char* field, const T& running, const T& next) {
    if (!(running == next)) out_.push_back(std::string(field) + " changes only with a restart");
  }
  std::vector<std::string> Take() { return std::move(out_); }

 private:
  std::vector<std::string> out_;
};

// A TLS section's settings, without the line it stands on: moving a
// section within the file is no change.
template <typename Tls>
Tls WithoutLines(Tls tls) {
  tls.line = 0;
  tls.cert_file.line = 0;
  tls.key_file.line = 0;
  if constexpr (requires { tls.client_ca_file; }) tls.client_ca_file.line = 0;
  if constexpr (requires { tls.ca_file; }) tls.ca_file.line = 0;
  return tls;
}

}  // namespace

std::vector<std::string> RestartOnlyChanges(const Config& running, const Config& next) {
  Changes c;
  c.Compare("listen", running.endpoint, next.endpoint);
  c.Compare("tls", WithoutLines(running.tls), WithoutLines(next.tls));
  c.Compare("threads", running.threads, next.threads);
  // Every worker's pool holds connections to the upstream: they would have
  // to be told apart from new ones, so the address and its TLS stay.
  c.Compare("upstream.url", running.upstream.url, next.upstream.url);
  c.Compare("upstream.tls", WithoutLines(running.upstream.tls), WithoutLines(next.upstream.tls));
  const StorageConfig& rs = running.storage;
  const StorageConfig& ns = next.storage;
  c.Compare("storage.engine", rs.engine, ns.engine);
  c.Compare("storage.path", rs.path, ns.path);
  c.Compare("storage.durability", rs.durability, ns.durability);
  c.Compare("storage.etcd.endpoints", rs.etcd.endpoints, ns.etcd.endpoints);
  c.Compare("storage.etcd.prefix", rs.etcd.prefix, ns.etcd.prefix);
  c.Compare("storage.etcd.tls", WithoutLines(rs.etcd.tls), WithoutLines(ns.etcd.tls));
  c.Compare("storage.etcd.timeout", rs.etcd.timeout, ns.etcd.timeout);
  c.Compare("storage.etcd.username", rs.etcd.username, ns.etcd.username);
  c.Compare("storage.etcd.password_file", rs.etcd.password_file.path,
            ns.etcd.password_file.path);
  c.Compare("storage.etcd.forward_within", rs.etcd.forward_within, ns.etcd.forward_within);
  c.Compare("storage.etcd.decision_timeout", rs.etcd.decision_timeout, ns.etcd.decision_timeout);
  {
    const config::OwnershipConfig& ro = rs.etcd.ownership;
    const config::OwnershipConfig& no = ns.etcd.ownership;
    c.Compare("storage.etcd.ownership.enabled", ro.enabled, no.enabled);
    c.Compare("storage.etcd.ownership.lease_ttl", ro.lease_ttl, no.lease_ttl);
    c.Compare("storage.etcd.ownership.margin", ro.margin, no.margin);
    c.Compare("storage.etcd.ownership.release_after", ro.release_after, no.release_after);
    c.Compare("storage.etcd.ownership.wait", ro.wait, no.wait);
    c.Compare("storage.etcd.ownership.name", ro.name, no.name);
  }
  c.Compare("storage.etcd.max_batch", rs.etcd.max_batch, ns.etcd.max_batch);
  // Opened at start (SIGUSR1 reopens the same paths).
  c.Compare("log.file", running.log.file.path, next.log.file.path);
  c.Compare("log.access_log_file", running.log.access_log_file.path,
            next.log.access_log_file.path);
  c.Compare("admin.listen", running.admin.endpoint, next.admin.endpoint);
  c.Compare("locks.listen", running.locks.endpoint, next.locks.endpoint);
  c.Compare("locks.max_ttl", running.locks.max_ttl, next.locks.max_ttl);
  // Sized once: the per-key queue and the per-client counts.
  c.Compare("limits.max_waiting_per_key", running.limits.max_waiting_per_key,
            next.limits.max_waiting_per_key);
  c.Compare("limits.max_connections_per_client", running.limits.max_connections_per_client,
            next.limits.max_connections_per_client);
  return c.Take();
}

}  // namespace fencegate::config
