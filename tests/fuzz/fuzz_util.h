#pragma once
// Shared by the fuzz targets: the entry point's signature and a check that
// stops the run (libFuzzer saves the input) when an invariant does not hold.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string_view>

// Built as a libFuzzer target (FENCEGATE_FUZZ=ON) or against replay_main.cc.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

// FUZZ_CHECK(cond): an invariant of the code under test. Unlike assert() it
// stays on in release builds, and it traps so that both libFuzzer and the
// replay ctest report the input. (A failed write of the message changes
// nothing: the trap follows either way, hence the (void).)
#define FUZZ_CHECK(cond)                                                                    \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      (void)std::fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond); \
      __builtin_trap();                                                                     \
    }                                                                                       \
  } while (0)

namespace fencegate::fuzz {

inline std::string_view AsText(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Splits off the text up to the first '\n' (all of it when there is none).
inline std::string_view NextLine(std::string_view* rest) {
  size_t nl = rest->find('\n');
  std::string_view line = rest->substr(0, nl);
  rest->remove_prefix(nl == std::string_view::npos ? rest->size() : nl + 1);
  return line;
}

}  // namespace fencegate::fuzz
