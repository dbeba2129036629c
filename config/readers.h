#pragma once
// The readers Load() builds on: one per section of the file, and what they
// share. Each reads through a YamlReader, which records the first error
// with file, line and dotted field, and returns false once there is one.
// Internal to config/.

#include <yaml-cpp/yaml.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "config/config.h"
#include "config/yaml_reader.h"

namespace fencegate::config::internal {

using Keys = std::vector<YamlReader::Key>;

// A handler that reads a file path (no NUL byte) into *out, with its line.
std::function<bool(const Field&)> FileInto(YamlReader& r, FileRef* out);

// A handler that reads a positive duration into *out.
std::function<bool(const Field&)> DurationInto(YamlReader& r, Duration* out);

// URLs (urls.cc).

// upstream.url: an http or https URL with a usable host, a port in
// 1..65535 if any, no user info, query or fragment. Sets url, https, host,
// port (80 or 443 when none is given) and base_path (its path without
// trailing slashes).
bool ReadUpstreamUrl(YamlReader& r, const Field& f, UpstreamConfig* up);
// storage.etcd.endpoints: a non-empty list of http or https URLs with a
// host, all of one scheme. Sets etcd->endpoints and etcd->https.
bool ReadEtcdEndpoints(YamlReader& r, const Field& list, EtcdConfig* etcd);

// TLS sections (tls_sections.cc). Files are only named here; tls/ reads
// them (--check too).

// upstream.tls and storage.etcd.tls: a TLS client's settings. Refuses a
// client certificate without its key (or the reverse), and a ca_file with
// verify off.
bool ReadClientTls(YamlReader& r, const Field& f, ClientTlsConfig* tls);
// `tls:` at the root: the client listener's certificate and key, both
// required.
bool ReadListenerTls(YamlReader& r, const Field& f, ListenerTlsConfig* tls);

// The sections (sections.cc). Each refuses what contradicts itself (an
// upstream or etcd tls section without https, no upstream.url).
bool ReadUpstream(YamlReader& r, const Field& f, UpstreamConfig* up);
bool ReadFencing(YamlReader& r, const Field& f, FencingConfig* fencing);
// storage.etcd.ownership (sections.cc).
bool ReadOwnership(YamlReader& r, const Field& f, OwnershipConfig* o);
bool ReadStorage(YamlReader& r, const Field& f, StorageConfig* storage);
bool ReadLimits(YamlReader& r, const Field& f, LimitsConfig* limits);
bool ReadLog(YamlReader& r, const Field& f, LogConfig* log);

// The root mapping (root.cc): every section, then the checks across
// sections (upstream present, no two listeners on one address).
bool ReadRoot(YamlReader& r, const Field& root, Config* c);
// Sets the endpoints of the documented default listen strings, before
// ReadRoot reads what the file sets.
void DeriveDefaults(Config* c);

// yaml-cpp 0.7's YAML::LoadAll never returns on some documents
// (stuck_document.cc): the mark of the first such document in `yaml`, or
// nullopt. Throws YAML::Exception on syntax errors.
std::optional<YAML::Mark> StuckDocument(const std::string& yaml);

}  // namespace fencegate::config::internal
