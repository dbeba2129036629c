#pragma once
// Reading a configuration file the way `--check` does, for the start, for
// --check itself and for a reload: the YAML and its validation, the admin
// token's file or variable, the routes compiled, and every certificate, key
// and CA file the file names read.

#include <memory>
#include <string>
#include <vector>

#include "config/config.h"
#include "config/secrets.h"
#include "tls/tls_context.h"

namespace fencegate::app {

struct CheckedConfig {
  std::shared_ptr<const config::Config> config;
  tls::Contexts tls;  // empty when the secrets and TLS files were not read
  // What is valid but likely a mistake, one sentence each: printed by
  // --check and logged at start.
  std::vector<std::string> warnings;
};

// Loads and validates `path`. With `read_files` (serving, --check, reload)
// the admin token's file or variable is resolved through `environment`
// and the TLS files are read too; the subcommands that need neither pass
// false. false + *error (file, line and field) on the first problem.
bool LoadChecked(const std::string& path, bool read_files, const config::Environment& environment,
                 CheckedConfig* out, std::string* error);

}  // namespace fencegate::app
