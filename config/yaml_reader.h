#pragma once
// YamlReader walks a yaml-cpp node tree strictly: unknown and duplicate keys
// and wrong types are errors. It records the first error as
// "FILE:LINE: field 'dotted.path': what is wrong (what is expected)" and
// every later call becomes a no-op returning false. Internal to config/.

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"

namespace fencegate::config::internal {

// A value being read: its node, its dotted path and the line to report.
struct Field {
  YAML::Node node;
  std::string path;  // "upstream.url", "routes[2].methods[0]"
  int line = 0;      // 1-based

  Field Child(const YAML::Node& child, std::string_view name, int child_line) const;
  Field Item(const YAML::Node& item, size_t index) const;
};

class YamlReader {
 public:
  explicit YamlReader(std::string file) : file_(std::move(file)) {}

  bool ok() const { return !error_.has_value(); }
  const std::string& error() const { return *error_; }
  const std::string& file() const { return file_; }

  // Records `FILE:LINE: field 'PATH': what (expected)` unless an error is
  // already recorded. Always returns false.
  bool Fail(const Field& field, std::string_view what, std::string_view expected);
  // Records `FILE:LINE: message` (no field), for document-level problems.
  bool FailDocument(int line, std::string_view message);

  // One accepted key of a mapping and what to do with its value.
  struct Key {
    std::string_view name;
    std::function<bool(const Field&)> read;
  };
  // Requires a mapping; rejects non-scalar, duplicate and unknown keys; calls
  // the matching handler for each present key in document order.
  bool Map(const Field& field, const std::vector<Key>& keys);
  // Requires a sequence and calls `read` for each item.
  bool Sequence(const Field& field, std::string_view expected,
                const std::function<bool(const Field&)>& read);

  // Scalars. Each checks the node type first and names the expectation.
  bool String(const Field& field, std::string* out);
  bool NonEmptyString(const Field& field, std::string_view expected, std::string* out);
  bool Bool(const Field& field, bool* out);
  bool Unsigned(const Field& field, uint64_t min, uint64_t max, uint64_t* out);
  bool PositiveDuration(const Field& field, Duration* out);
  // A size (ParseSize: "65536", "512KiB", "1MiB") from min to max bytes.
  bool Size(const Field& field, uint64_t min, uint64_t max, uint64_t* out);
  // One of `choices`, case-sensitive.
  bool Choice(const Field& field, std::initializer_list<std::string_view> choices,
              std::string* out);
  // A listen address; "" allowed (and gives nullopt) only when `may_be_off`.
  bool Listen(const Field& field, bool may_be_off, std::string* text,
              std::optional<Endpoint>* endpoint);

  // Describes a node for messages: "a mapping", "the value 'abc'", ...
  static std::string Describe(const YAML::Node& node);

 private:
  bool Scalar(const Field& field, std::string_view expected, std::string* out);

  std::string file_;
  std::optional<std::string> error_;
};

// 1-based line of a node, or `fallback` when the node carries no mark.
int LineOf(const YAML::Node& node, int fallback);

}  // namespace fencegate::config::internal
