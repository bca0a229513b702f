// libFuzzer target for the loss-trace reader (io/trace.cpp) and what `mpitron info` / `compare`
// make of a trace (io/inspect.cpp): the input is a whole trace.h5; every call must either work or
// throw UsageError. libhdf5 itself is not instrumented.
#include <cstdint>
#include <sstream>
#include <string>

#include "io/inspect.hpp"
#include "io/trace.hpp"
#include "base/check.hpp"
#include "tests/fuzz/fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mpitron;
  static const std::string path = (fuzz::scratch_dir() / "trace.h5").string();
  fuzz::write_file(path, data, size);
  try {
    (void)io::read_trace(path);
  } catch (const UsageError&) {
  }
  fuzz::print_info_both_ways(path);
  try {
    (void)io::compare_traces(path, path);
  } catch (const UsageError&) {
  }
  return 0;
}
