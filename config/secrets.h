#pragma once
// Secrets the configuration names but does not hold: the admin bearer token
// (admin.token_file, admin.token_env) and the etcd password
// (storage.etcd.password_file). They are read after Load(), as the TLS
// files are, by a start and by --check; `fencegate route`, `export` and
// `import` do not need them.

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "config/config.h"

namespace fencegate::config {

// The most a secret file may hold. A secret is a line; a larger file is a
// wrong path (a log, a device), not a secret.
inline constexpr size_t kMaxSecretBytes = 65536;

// Reads the secret in `file`, named by the field `field` (its dotted path,
// e.g. "storage.etcd.password_file") of the configuration `source`: the
// file's whole content less one trailing newline ("\n" or "\r\n"). The
// file's permissions are not checked (docs/operations.md, "Secrets").
// nullopt and *error = "SOURCE:LINE: field 'FIELD': ..." when the file
// cannot be read, is empty, holds more than one line or more than
// kMaxSecretBytes.
std::optional<std::string> ReadSecretFile(const std::string& source, const FileRef& file,
                                          std::string_view field, std::string* error);

// An environment variable's value, or nullopt when it is not set.
using Environment = std::function<std::optional<std::string>(const std::string& name)>;

// Sets config->admin.token from admin.token_file or admin.token_env, when
// one of them is set (Load() refuses more than one of token, token_file
// and token_env). false and *error, with file, line and field, when the
// file cannot be used or the variable is unset or empty.
bool ResolveSecrets(Config* config, const Environment& environment, std::string* error);

}  // namespace fencegate::config
