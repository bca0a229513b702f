// Line-oriented text files (io/text_lines.hpp).
#include "io/text_lines.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "base/check.hpp"

namespace mpitron::io {

std::vector<std::string> read_lines(const std::string& path, const std::string& what) {
  if (const std::string why = wrong_kind_of_path(path, false); !why.empty())
    throw UsageError(fmt::format("{} file {} {}", what, path, why));
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw UsageError(fmt::format("cannot read {} file {}: {}", what, path, std::strerror(errno)));
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(std::move(line));
  }
  if (in.bad()) throw UsageError(fmt::format("reading {} file {} failed", what, path));
  return lines;
}

void write_lines(const std::string& path, const std::vector<std::string>& lines) {
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw UsageError(fmt::format("cannot create {}: {}", tmp, std::strerror(errno)));
  bool ok = true;
  int failure = 0;  // errno of the first call that failed
  for (const std::string& line : lines) {
    ok = ok && std::fwrite(line.data(), 1, line.size(), f) == line.size();
    ok = ok && std::fputc('\n', f) != EOF;
    if (!ok && !failure) failure = errno;
  }
  if (std::fclose(f) != 0 && ok) ok = false, failure = errno;
  if (ok && std::rename(tmp.c_str(), path.c_str()) != 0) ok = false, failure = errno;
  if (!ok) {
    const std::string why = std::strerror(failure);
    std::remove(tmp.c_str());
    throw UsageError(fmt::format("cannot write {}: {}", path, why));
  }
}

}  // namespace mpitron::io
