#pragma once
// Helpers for config tests: load YAML text under the name "test.yaml" and
// check the error message's file, line and field.

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <variant>

#include "config/config.h"

namespace fencegate::config::testing {

inline constexpr std::string_view kTestFile = "test.yaml";
// Line 1 of most test documents: the one required field.
inline constexpr std::string_view kUpstream = "upstream: {url: \"http://127.0.0.1:9000\"}\n";

// A test document: the required field, then `rest`.
inline std::string WithUpstream(std::string_view rest) {
  return std::string(kUpstream) + std::string(rest);
}

// The error message of loading `yaml`, or "" when it loads.
inline std::string ErrorOf(std::string_view yaml) {
  LoadResult result = LoadFromString(yaml, kTestFile);
  if (const auto* error = std::get_if<ConfigError>(&result)) return error->message;
  return "";
}

// Loads `yaml`; fails the current test (and returns a default Config) on error.
inline Config MustLoad(std::string_view yaml) {
  LoadResult result = LoadFromString(yaml, kTestFile);
  if (const auto* error = std::get_if<ConfigError>(&result)) {
    ADD_FAILURE() << "unexpected error: " << error->message;
    return Config{};
  }
  return std::get<Config>(std::move(result));
}

// Success when loading `yaml` fails with a message that starts with
// "test.yaml:LINE: field 'FIELD': " and contains `fragment`.
inline ::testing::AssertionResult FailsAt(std::string_view yaml, int line, std::string_view field,
                                          std::string_view fragment = "") {
  std::string message = ErrorOf(yaml);
  if (message.empty()) return ::testing::AssertionFailure() << "loaded without error";
  std::string prefix = std::string(kTestFile) + ":" + std::to_string(line) + ": field '" +
                       std::string(field) + "': ";
  if (message.rfind(prefix, 0) != 0) {
    return ::testing::AssertionFailure()
           << "message \"" << message << "\" does not start with \"" << prefix << "\"";
  }
  if (message.find(fragment) == std::string::npos) {
    return ::testing::AssertionFailure()
           << "message \"" << message << "\" lacks \"" << fragment << "\"";
  }
  return ::testing::AssertionSuccess() << message;
}

}  // namespace fencegate::config::testing
