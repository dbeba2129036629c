// The TLS sections: the listener's (`tls:`) and a client's (upstream.tls,
// storage.etcd.tls). Files are only named here; tls/ reads them (--check
// too).

#include <functional>
#include <string>
#include <string_view>
#include <utility>

#include "config/readers.h"

namespace fencegate::config::internal {
namespace {

bool ReadTlsVersion(YamlReader& r, const Field& f, TlsVersion* out) {
  std::string value;
  if (!r.Choice(f, {"1.2", "1.3"}, &value)) return false;
  *out = value == "1.2" ? TlsVersion::kTls12 : TlsVersion::kTls13;
  return true;
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

}  // namespace

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

}  // namespace fencegate::config::internal
