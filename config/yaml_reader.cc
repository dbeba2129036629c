// Strict walking of a yaml-cpp tree with file:line:field error messages.

#include "config/yaml_reader.h"

#include <charconv>
#include <set>

#include "config/internal.h"

namespace fencegate::config::internal {
namespace {

std::string JoinQuoted(std::initializer_list<std::string_view> words, std::string_view last_sep) {
  std::string out;
  size_t i = 0;
  for (std::string_view word : words) {
    if (i > 0) out += (i + 1 == words.size()) ? last_sep : std::string_view(", ");
    out += word;
    ++i;
  }
  return out;
}

std::string KeyList(const std::vector<YamlReader::Key>& keys) {
  std::string out;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i > 0) out += ", ";
    out += keys[i].name;
  }
  return out;
}

std::string Lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

// The accepted key that the unknown `name` most likely misspells, or "":
// the closest with letter case ignored, at most one edit away for a name of
// up to three characters and two for a longer one; on a tie, the first in
// `keys`.
std::string_view ClosestKey(std::string_view name, const std::vector<YamlReader::Key>& keys) {
  const std::string lower = Lower(name);
  size_t best = name.size() <= 3 ? 1 : 2;
  std::string_view closest;
  for (const YamlReader::Key& key : keys) {
    const size_t distance = EditDistance(lower, Lower(key.name));
    if (distance <= best && (closest.empty() || distance < best)) {
      best = distance;
      closest = key.name;
    }
  }
  return closest;
}

}  // namespace

int LineOf(const YAML::Node& node, int fallback) {
  const YAML::Mark mark = node.Mark();
  return mark.line >= 0 ? mark.line + 1 : fallback;
}

Field Field::Child(const YAML::Node& child, std::string_view name, int child_line) const {
  std::string child_path = path.empty() ? std::string(name) : path + "." + std::string(name);
  return Field{child, std::move(child_path), child_line};
}

Field Field::Item(const YAML::Node& item, size_t index) const {
  return Field{item, path + "[" + std::to_string(index) + "]", LineOf(item, line)};
}

bool YamlReader::Fail(const Field& field, std::string_view what, std::string_view expected) {
  if (error_) return false;
  std::string message = file_ + ":" + std::to_string(field.line) + ": ";
  if (!field.path.empty()) message += "field '" + field.path + "': ";
  message += what;
  if (!expected.empty()) message += " (expected " + std::string(expected) + ")";
  error_ = std::move(message);
  return false;
}

bool YamlReader::FailDocument(int line, std::string_view message) {
  if (error_) return false;
  error_ = file_ + ":" + std::to_string(line) + ": " + std::string(message);
  return false;
}

std::string YamlReader::Describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Scalar:
      return "the value '" + node.Scalar() + "'";
    case YAML::NodeType::Null:
      return "empty (no value)";
    case YAML::NodeType::Undefined:
      break;
  }
  return "undefined";
}

bool YamlReader::Map(const Field& field, const std::vector<Key>& keys) {
  if (!ok()) return false;
  if (!field.node.IsMap()) {
    return Fail(field, "is " + Describe(field.node), "a mapping with keys " + KeyList(keys));
  }
  std::set<std::string> seen;
  for (const auto& entry : field.node) {  // entry: a pair of (copied) key and value nodes
    const YAML::Node key_node = entry.first;
    int key_line = LineOf(key_node, field.line);
    if (!key_node.IsScalar()) {
      return Fail(Field{key_node, field.path, key_line}, "has a key that is " + Describe(key_node),
                  "plain key names");
    }
    const std::string& name = key_node.Scalar();
    Field child = field.Child(entry.second, name, key_line);
    const Key* match = nullptr;
    for (const Key& key : keys) {
      if (key.name == name) match = &key;
    }
    if (match == nullptr) {
      std::string what = "unknown key";
      if (std::string_view closest = ClosestKey(name, keys); !closest.empty()) {
        what += "; did you mean '" + std::string(closest) + "'?";
      }
      return Fail(child, what, "one of " + KeyList(keys));
    }
    if (!seen.insert(name).second) return Fail(child, "duplicate key", "each key at most once");
    if (!match->read(child)) return false;
  }
  return ok();
}

bool YamlReader::Sequence(const Field& field, std::string_view expected,
                          const std::function<bool(const Field&)>& read) {
  if (!ok()) return false;
  if (!field.node.IsSequence()) return Fail(field, "is " + Describe(field.node), expected);
  for (size_t i = 0; i < field.node.size(); ++i) {
    if (!read(field.Item(field.node[i], i))) return false;
  }
  return ok();
}

bool YamlReader::Scalar(const Field& field, std::string_view expected, std::string* out) {
  if (!ok()) return false;
  if (!field.node.IsScalar()) return Fail(field, "is " + Describe(field.node), expected);
  *out = field.node.Scalar();
  return true;
}

bool YamlReader::String(const Field& field, std::string* out) {
  return Scalar(field, "a string; write \"\" for an empty one", out);
}

bool YamlReader::NonEmptyString(const Field& field, std::string_view expected, std::string* out) {
  std::string value;
  if (!Scalar(field, expected, &value)) return false;
  if (value.empty()) return Fail(field, "is empty", expected);
  *out = std::move(value);
  return true;
}

bool YamlReader::Bool(const Field& field, bool* out) {
  std::string value;
  if (!Scalar(field, "true or false", &value)) return false;
  if (value == "true" || value == "True" || value == "TRUE") {
    *out = true;
  } else if (value == "false" || value == "False" || value == "FALSE") {
    *out = false;
  } else {
    return Fail(field, "'" + value + "' is not a boolean", "true or false");
  }
  return true;
}

bool YamlReader::Unsigned(const Field& field, uint64_t min, uint64_t max, uint64_t* out) {
  std::string expected =
      "a whole number from " + std::to_string(min) + " to " + std::to_string(max);
  std::string value;
  if (!Scalar(field, expected, &value)) return false;
  uint64_t number = 0;
  const char* end = value.data() + value.size();
  auto [ptr, ec] = std::from_chars(value.data(), end, number);
  bool digits_only = !value.empty() && value.find_first_not_of("0123456789") == std::string::npos;
  if (!digits_only || ec != std::errc() || ptr != end) {
    if (digits_only) return Fail(field, "'" + value + "' is too large", expected);
    return Fail(field, "'" + value + "' is not a whole number", expected);
  }
  if (number < min || number > max) return Fail(field, "'" + value + "' is out of range", expected);
  *out = number;
  return true;
}

bool YamlReader::PositiveDuration(const Field& field, Duration* out) {
  static constexpr std::string_view kExpected =
      "a positive duration such as 250ms, 10s, 5m, 24h or 1h30m";
  std::string value;
  if (!Scalar(field, kExpected, &value)) return false;
  std::optional<Duration> parsed = ParseDuration(value);
  if (!parsed) return Fail(field, "'" + value + "' is not a duration", kExpected);
  if (parsed->count() <= 0) return Fail(field, "'" + value + "' is zero", kExpected);
  *out = *parsed;
  return true;
}

bool YamlReader::Size(const Field& field, uint64_t min, uint64_t max, uint64_t* out) {
  const std::string expected = "a size such as 65536, 512KiB or 1MiB, from " + FormatSize(min) +
                               " to " + FormatSize(max);
  std::string value;
  if (!Scalar(field, expected, &value)) return false;
  std::optional<uint64_t> bytes = ParseSize(value);
  if (!bytes) return Fail(field, "'" + value + "' is not a size", expected);
  if (*bytes < min) return Fail(field, "'" + value + "' is less than " + FormatSize(min), expected);
  if (*bytes > max) return Fail(field, "'" + value + "' is more than " + FormatSize(max), expected);
  *out = *bytes;
  return true;
}

bool YamlReader::Choice(const Field& field, std::initializer_list<std::string_view> choices,
                        std::string* out) {
  std::string expected = JoinQuoted(choices, " or ");
  std::string value;
  if (!Scalar(field, expected, &value)) return false;
  for (std::string_view choice : choices) {
    if (value == choice) {
      *out = std::move(value);
      return true;
    }
  }
  return Fail(field, "'" + value + "' is not allowed", expected);
}

bool YamlReader::Listen(const Field& field, bool may_be_off, std::string* text,
                        std::optional<Endpoint>* endpoint) {
  std::string expected = "HOST:PORT with an IPv4 address, [IPv6] or localhost, e.g. 127.0.0.1:8080";
  if (may_be_off) expected += ", or \"\" to turn it off";
  std::string value;
  if (!Scalar(field, expected, &value)) return false;
  if (value.empty() && may_be_off) {
    *text = "";
    *endpoint = std::nullopt;
    return true;
  }
  std::optional<Endpoint> parsed = ParseEndpoint(value);
  if (!parsed) return Fail(field, "'" + value + "' is not a listen address", expected);
  *text = std::move(value);
  *endpoint = std::move(parsed);
  return true;
}

}  // namespace fencegate::config::internal
