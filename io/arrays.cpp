#include "io/arrays.hpp"

#include <fmt/format.h>

#include "io/h5.hpp"

namespace mpitron::io {

void write_int32_dataset(const std::string& path, const std::string& name,
                         const std::vector<int64_t>& shape, const std::vector<int32_t>& data) {
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  hid_t created;
  {
    QuietErrors quiet;
    created = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  }
  if (created < 0)
    throw UsageError(
        fmt::format("cannot create {} (does its folder exist and is it writable?)", path));
  Handle file(created);
  Handle space(H5_CHECK(H5Screate_simple(int(dims.size()), dims.data(), nullptr)));
  Handle dset(H5_CHECK(
      H5Dcreate2(file, name.c_str(), H5T_STD_I32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
  H5_CHECK(H5Dwrite(dset, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()));
  dset.close();
  file.close();
}

std::vector<int32_t> read_int32_dataset(const std::string& path, const std::string& name,
                                        std::vector<int64_t>& shape) {
  Handle file = open_user_file(path, "token file");
  UserFileScope scope(path, "token file");
  if (!path_exists(file, name)) throw UsageError(fmt::format("{} has no dataset /{}", path, name));
  Handle dset(H5_CHECK(H5Dopen2(file, name.c_str(), H5P_DEFAULT)));
  shape = dataset_shape(dset);
  {
    Handle type(H5_CHECK(H5Dget_type(dset)));
    require_sound_numeric_type(type, "/" + name);
    if (H5Tget_class(type) != H5T_INTEGER)
      throw UsageError(fmt::format("{}: /{} holds {}, not integers", path, name, dtype_name(type)));
  }
  size_t n = 1;
  for (auto d : shape) n *= size_t(d);
  std::vector<int32_t> data(n);
  H5_CHECK(H5Dread(dset, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()));
  return data;
}

}  // namespace mpitron::io
