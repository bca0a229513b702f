// libFuzzer target for run presets (src/model/config.cpp, TOML through toml11): the input is the
// .toml file; its lines that start with "#set " (TOML comments) are also passed as --set overrides.
// Loading and validating must either work or throw UsageError.
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "base/check.hpp"
#include "src/model/config.hpp"
#include "tests/fuzz/fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mpitron;
  static const std::string path = (fuzz::scratch_dir() / "preset.toml").string();
  fuzz::write_file(path, data, size);
  std::vector<std::string> overrides;
  std::istringstream lines(std::string(reinterpret_cast<const char*>(data), size));
  for (std::string line; std::getline(lines, line);)
    if (line.starts_with("#set ")) overrides.push_back(line.substr(5));
  try {
    const RunConfig cfg = load_run_config(path, overrides);
    validate_config(cfg);
  } catch (const UsageError&) {
  }
  return 0;
}
