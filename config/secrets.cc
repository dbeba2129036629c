// Secret files and variables: read once, checked, turned into the values
// the components use (config/secrets.h).

#include "config/secrets.h"

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <utility>

namespace fencegate::config {
namespace {

std::string FieldError(const std::string& source, int line, std::string_view field,
                       std::string_view what) {
  return source + ":" + std::to_string(line) + ": field '" + std::string(field) + "': " +
         std::string(what);
}

}  // namespace

std::optional<std::string> ReadSecretFile(const std::string& source, const FileRef& file,
                                          std::string_view field, std::string* error) {
  const std::string quoted = "'" + file.path + "'";
  auto fail = [&](std::string_view what) -> std::optional<std::string> {
    *error = FieldError(source, file.line, field, what);
    return std::nullopt;
  };
  std::error_code ec;
  if (std::filesystem::is_directory(file.path, ec)) {
    return fail("cannot read " + quoted + ": is a directory");
  }
  // std::generic_category().message(), unlike std::strerror(), is
  // thread-safe.
  std::ifstream in(file.path, std::ios::binary);
  if (!in) {
    const int err = errno;
    return fail("cannot read " + quoted + ": " + std::generic_category().message(err));
  }
  // One byte more than the limit tells a file at the limit from a larger
  // one, and a device that never ends (/dev/zero) is read no further.
  std::string secret(kMaxSecretBytes + 1, '\0');
  in.read(secret.data(), static_cast<std::streamsize>(secret.size()));
  if (in.bad()) {
    const int err = errno;
    return fail("cannot read " + quoted + ": " + std::generic_category().message(err));
  }
  secret.resize(static_cast<size_t>(in.gcount()));
  if (secret.size() > kMaxSecretBytes) {
    return fail(quoted + " holds more than " + std::to_string(kMaxSecretBytes) +
                " bytes (expected a file holding the secret on one line)");
  }
  if (!secret.empty() && secret.back() == '\n') {
    secret.pop_back();
    if (!secret.empty() && secret.back() == '\r') secret.pop_back();
  }
  if (secret.empty()) return fail(quoted + " is empty (expected a file holding the secret)");
  if (secret.find_first_of("\r\n") != std::string::npos) {
    return fail(quoted + " holds more than one line (expected the secret on one line)");
  }
  return secret;
}

bool ResolveSecrets(Config* config, const Environment& environment, std::string* error) {
  AdminConfig& admin = config->admin;
  if (!admin.token_file.empty()) {
    std::optional<std::string> token =
        ReadSecretFile(config->source, admin.token_file, "admin.token_file", error);
    if (!token) return false;
    admin.token = std::move(*token);
  } else if (!admin.token_env.empty()) {
    std::optional<std::string> token = environment(admin.token_env);
    if (!token || token->empty()) {
      *error = FieldError(config->source, admin.token_env_line, "admin.token_env",
                          "the environment variable " + admin.token_env + " is " +
                              (token ? "empty" : "not set") +
                              " (expected it to hold the admin bearer token)");
      return false;
    }
    admin.token = std::move(*token);
  }
  return true;
}

}  // namespace fencegate::config
