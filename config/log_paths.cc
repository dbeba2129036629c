#include "config/log_paths.h"

#include <unistd.h>

#include <filesystem>
#include <string_view>
#include <system_error>

namespace fencegate::config {

namespace {

bool CheckLogFile(const std::string& source, const FileRef& file, std::string_view field,
                  std::string* error) {
  if (file.empty()) return true;  // standard error
  auto fail = [&](const std::string& what) {
    *error = source + ":" + std::to_string(file.line) + ": field '" + std::string(field) +
             "': " + what;
    return false;
  };
  namespace fs = std::filesystem;
  const fs::path path(file.path);
  std::error_code ec;
  if (fs::is_directory(path, ec)) return fail("'" + file.path + "' is a directory");
  const bool exists = fs::exists(path, ec);
  if (exists) {
    if (::access(path.c_str(), W_OK) != 0) {
      return fail("'" + file.path + "' exists and is not writable (expected a file fencegate may "
                  "append to)");
    }
    return true;
  }
  fs::path dir = path.parent_path();
  if (dir.empty()) dir = ".";
  if (!fs::is_directory(dir, ec)) {
    return fail("the directory '" + dir.string() + "' of '" + file.path +
                "' does not exist (expected a file in an existing directory)");
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    return fail("the directory '" + dir.string() + "' of '" + file.path +
                "' is not writable (expected a directory fencegate may create the file in)");
  }
  return true;
}

}  // namespace

bool CheckLogFiles(const Config& config, std::string* error) {
  return CheckLogFile(config.source, config.log.file, "log.file", error) &&
         CheckLogFile(config.source, config.log.access_log_file, "log.access_log_file", error);
}

}  // namespace fencegate::config
