// Whole int32 arrays in small HDF5 files: token batches for `mpitron batch` and `mpitron eval
// --tokens` (and the Python oracle, which reads and writes the same layout with h5py).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace mpitron::io {

// Creates (overwrites) path with dataset /name of the given shape.
void write_int32_dataset(const std::string& path, const std::string& name,
                         const std::vector<int64_t>& shape, const std::vector<int32_t>& data);

// Reads /name; UsageError if the file or dataset is missing or unreadable.
std::vector<int32_t> read_int32_dataset(const std::string& path, const std::string& name,
                                        std::vector<int64_t>& shape);

}  // namespace mpitron::io
