// Load(): YAML text -> validated Config (docs/contract.md, "Configuration").
// Every section has one reader function (readers.h); all of them go through
// YamlReader so that unknown keys, wrong types and bad values stop the load
// with file, line and field.

#include "config/config.h"

#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <exception>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include "config/internal.h"
#include "config/readers.h"
#include "config/yaml_reader.h"

namespace fencegate::config {
namespace {

using internal::Field;
using internal::YamlReader;

LoadResult LoadChecked(std::string_view yaml, const std::string& name) {
  YamlReader reader(name);
  std::vector<YAML::Node> docs;
  try {
    const std::string text(yaml);
    if (std::optional<YAML::Mark> stuck = internal::StuckDocument(text)) {
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
  internal::DeriveDefaults(&config);
  if (!internal::ReadRoot(reader, Field{root, "", internal::LineOf(root, 1)}, &config)) {
    return ConfigError{reader.error()};
  }
  return config;
}

LoadResult LoadGuarded(std::string_view yaml, std::string_view name) {
  std::string file(name);
  try {
    return LoadChecked(yaml, file);
  } catch (const std::exception& e) {
    return ConfigError{file + ": internal error while reading the configuration: " + e.what()};
  } catch (...) {
    return ConfigError{file + ": internal error while reading the configuration"};
  }
}

}  // namespace

LoadResult LoadFromString(std::string_view yaml, std::string_view name) {
  return LoadGuarded(yaml, name);
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
