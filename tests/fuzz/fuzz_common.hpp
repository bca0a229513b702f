// Shared by the libFuzzer targets: mpitron's readers take file paths, so each iteration writes the
// fuzz input to a per-process scratch file (in /dev/shm when it exists, else $TMPDIR or /tmp).
// A UsageError is a reader's correct answer to bad input; anything else escaping is a finding.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>

#include "io/inspect.hpp"
#include "base/check.hpp"

namespace mpitron::fuzz {

// A fresh private folder for this process's scratch files (removed at exit).
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::path base = fs::is_directory("/dev/shm", ec) ? fs::path("/dev/shm") : fs::path();
    if (base.empty()) {
      const char* tmp = std::getenv("TMPDIR");
      base = tmp && *tmp ? fs::path(tmp) : fs::path("/tmp");
    }
    const fs::path d = base / ("mpitron_fuzz_" + std::to_string(::getpid()));
    fs::create_directories(d);
    std::atexit([] {
      std::error_code e;
      std::filesystem::remove_all(scratch_dir(), e);
    });
    return d;
  }();
  return dir;
}

// Writes size bytes to path, replacing it; aborts when it cannot (the fuzzer's own failure).
inline void write_file(const std::string& path, const uint8_t* data, size_t size) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || (size > 0 && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0) {
    std::perror(path.c_str());
    std::abort();
  }
}

// `mpitron info` of a file, summary and full; a UsageError is the right answer to a bad file.
inline void print_info_both_ways(const std::string& path) {
  for (bool full : {false, true}) {
    try {
      std::ostringstream out;
      io::print_info(path, out, full);
    } catch (const UsageError&) {
    }
  }
}

}  // namespace mpitron::fuzz
