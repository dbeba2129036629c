// A main() for the fuzz targets in the normal (non-libFuzzer) build: runs
// LLVMFuzzerTestOneInput once on every file named on the command line, and
// on every file under every directory named (sorted, so runs repeat). The
// ctest fuzz.replay.* tests run it over the seed corpora, so every seed goes
// through the real code in every test run. Arguments starting with '-' are
// libFuzzer flags and are ignored. Exits 1 when no input was found.

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_util.h"

namespace fs = std::filesystem;

int main(int argc, char** argv) {
  std::vector<fs::path> inputs;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.starts_with("-")) continue;
    if (fs::is_directory(arg)) {
      for (const auto& entry : fs::recursive_directory_iterator(arg)) {
        if (entry.is_regular_file()) inputs.push_back(entry.path());
      }
    } else if (fs::is_regular_file(arg)) {
      inputs.emplace_back(arg);
    } else {
      std::cerr << "replay: " << arg << ": no such file or directory\n";
      return 1;
    }
  }
  std::sort(inputs.begin(), inputs.end());
  for (const fs::path& path : inputs) {
    std::ifstream in(path, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) {
      std::cerr << "replay: cannot read " << path.string() << "\n";
      return 1;
    }
    std::cerr << "replay: " << path.string() << "\n";
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  std::cout << "replayed " << inputs.size() << " input(s)\n";
  return inputs.empty() ? 1 : 0;
}
