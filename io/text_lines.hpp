// Line-oriented text files (parallel corpora, translations, references): read whole, written to a
// temporary name and renamed, so a failed or interrupted run leaves no partial file.
#pragma once
#include <string>
#include <vector>

namespace mpitron::io {

// The lines of a text file without their '\n' (and a '\r' before it); a last line without '\n'
// counts. UsageError naming `what` and the path when the file is missing or unreadable.
std::vector<std::string> read_lines(const std::string& path, const std::string& what);

// Writes the lines, each ending in '\n', to path + ".tmp" and renames it to path; UsageError when
// the file cannot be written (the temporary file is removed).
void write_lines(const std::string& path, const std::vector<std::string>& lines);

}  // namespace mpitron::io
