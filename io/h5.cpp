// HDF5 helpers: error reporting, id ownership, attributes, object listing, opening user files.
#include "io/h5.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace mpitron::io {

namespace {

struct ErrorWalk {
  std::string innermost, outermost;
};

herr_t collect_error(unsigned n, const H5E_error2_t* e, void* data) {
  auto* w = static_cast<ErrorWalk*>(data);
  std::string msg = std::string(e->func_name ? e->func_name : "?") + ": " +
                    (e->desc && *e->desc ? e->desc : "(no description)");
  if (n == 0) w->innermost = msg;
  w->outermost = msg;
  return 0;
}

}  // namespace

std::string h5_error_reason() {
  ErrorWalk w;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect_error, &w);
  if (w.innermost.empty()) return "HDF5 call failed (empty error stack)";
  if (w.innermost == w.outermost) return w.innermost;
  return w.outermost + " <- " + w.innermost;
}

namespace {
thread_local const UserFileScope* current_scope = nullptr;
}

UserFileScope::UserFileScope(const std::string& path, const std::string& what, Mode mode)
    : path_(path), what_(what), mode_(mode), prev_(current_scope) {
  current_scope = this;
}

UserFileScope::~UserFileScope() {
  current_scope = prev_;
}

std::string system_message(const std::string& reason) {
  // The file driver's report of a failed open() or write() quotes strerror: keep just that.
  const std::string key = "error message = '";
  const size_t at = reason.find(key);
  const size_t end = at == std::string::npos ? at : reason.find('\'', at + key.size());
  return end == std::string::npos ? reason : reason.substr(at + key.size(), end - at - key.size());
}

void h5_fail(const char* file, int line, const char* call) {
  const std::string reason = h5_error_reason();
  if (const UserFileScope* s = current_scope) {
    H5Eclear2(H5E_DEFAULT);
    if (s->mode_ == UserFileScope::writing)
      throw H5WriteError(fmt::format("cannot write {} {} (is its disk full?): {}: {}", s->what_,
                                     s->path_, call, system_message(reason)));
    throw UsageError(s->what_ + " " + s->path_ +
                     " is not a readable HDF5 file (truncated or corrupt?): " + call + ": " +
                     reason);
  }
  ::mpitron::fail_at(file, line, call, reason);
}

void Handle::close() {
  if (id_ < 0) return;
  hid_t id = std::exchange(id_, H5I_INVALID_HID);
  switch (H5Iget_type(id)) {
    case H5I_FILE:
      H5_CHECK(H5Fclose(id));
      break;
    case H5I_GROUP:
      H5_CHECK(H5Gclose(id));
      break;
    case H5I_DATASET:
      H5_CHECK(H5Dclose(id));
      break;
    case H5I_DATASPACE:
      H5_CHECK(H5Sclose(id));
      break;
    case H5I_DATATYPE:
      H5_CHECK(H5Tclose(id));
      break;
    case H5I_GENPROP_LST:
      H5_CHECK(H5Pclose(id));
      break;
    case H5I_ATTR:
      H5_CHECK(H5Aclose(id));
      break;
    default:
      H5_CHECK(H5Idec_ref(id));
      break;
  }
}

void Handle::reset() noexcept {
  if (id_ < 0) return;
  hid_t id = std::exchange(id_, H5I_INVALID_HID);
  H5E_auto2_t func = nullptr;
  void* data = nullptr;
  H5Eget_auto2(H5E_DEFAULT, &func, &data);
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  switch (H5Iget_type(id)) {
    case H5I_FILE:
      H5Fclose(id);
      break;
    case H5I_GROUP:
      H5Gclose(id);
      break;
    case H5I_DATASET:
      H5Dclose(id);
      break;
    case H5I_DATASPACE:
      H5Sclose(id);
      break;
    case H5I_DATATYPE:
      H5Tclose(id);
      break;
    case H5I_GENPROP_LST:
      H5Pclose(id);
      break;
    case H5I_ATTR:
      H5Aclose(id);
      break;
    default:
      H5Idec_ref(id);
      break;
  }
  H5Eset_auto2(H5E_DEFAULT, func, data);
}

QuietErrors::QuietErrors() {
  H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

QuietErrors::~QuietErrors() {
  H5Eset_auto2(H5E_DEFAULT, func_, data_);
}

Handle default_fapl(bool lock) {
  Handle fapl(H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)));
#if H5_VERSION_GE(1, 10, 7)
  H5_CHECK(H5Pset_file_locking(fapl, lock, true));
#else
  (void)lock;  // older HDF5: only HDF5_USE_FILE_LOCKING=FALSE in the environment turns it off
#endif
  return fapl;
}

bool has_hdf5_signature(const std::string& path) {
  static const char sig[8] = {'\x89', 'H', 'D', 'F', '\r', '\n', '\x1a', '\n'};
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  for (std::streamoff off = 0; off + 8 <= size; off = off == 0 ? 512 : off * 2) {
    char buf[8];
    in.seekg(off);
    if (!in.read(buf, 8)) return false;
    if (std::memcmp(buf, sig, 8) == 0) return true;
  }
  return false;
}

Handle open_user_file(const std::string& path, const std::string& what, bool read_write,
                      hid_t fapl) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec))
    throw UsageError(what + " " + path + " does not exist (check the path)");
  if (fs::is_directory(path, ec))
    throw UsageError(what + " " + path + " is a directory, not an HDF5 file");
  if (!has_hdf5_signature(path))
    throw UsageError(what + " " + path + " is not an HDF5 file (wrong file?)");
  Handle own_fapl;
  if (fapl < 0) {
    own_fapl = default_fapl();
    fapl = own_fapl;
  }
  QuietErrors quiet;
  hid_t f = H5Fopen(path.c_str(), read_write ? H5F_ACC_RDWR : H5F_ACC_RDONLY, fapl);
  if (f < 0) {
    std::string reason = h5_error_reason();
    if (reason.find("already open for write") != std::string::npos)
      throw UsageError(what + " " + path + " is marked open for writing by another process " +
                       "(if none is, clear the mark with `h5clear -s " + path + "`)");
    if (reason.find("unable to lock file") != std::string::npos)
      throw UsageError(what + " " + path +
                       " is open in another process (another run writing the same folder?)");
    if (read_write && reason.find("ermission denied") != std::string::npos)
      throw UsageError(what + " " + path + " is not writable (check its permissions)");
    throw UsageError(what + " " + path + " is not a readable HDF5 file (truncated or corrupt?)");
  }
  return Handle(f);
}

// ---- attributes ---------------------------------------------------------------------------------

namespace {

Handle vlen_string_type() {
  Handle t(H5_CHECK(H5Tcopy(H5T_C_S1)));
  H5_CHECK(H5Tset_size(t, H5T_VARIABLE));
  H5_CHECK(H5Tset_cset(t, H5T_CSET_UTF8));
  return t;
}

std::string format_double(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  // Shortest representation that round-trips.
  for (int prec = 1; prec <= 17; ++prec) {
    char b[64];
    std::snprintf(b, sizeof b, "%.*g", prec, x);
    if (std::strtod(b, nullptr) == x) return b;
  }
  return buf;
}

// Reads one attribute of any type (see read_attributes).
AttrValue read_attribute(hid_t attr, const std::string& name) {
  Handle type(H5_CHECK(H5Aget_type(attr)));
  require_sound_numeric_type(type, fmt::format("attribute '{}'", name));
  Handle space(H5_CHECK(H5Aget_space(attr)));
  const hssize_t n = H5_CHECK(H5Sget_simple_extent_npoints(space));
  const H5T_class_t cls = H5Tget_class(type);
  if (cls == H5T_INTEGER || cls == H5T_FLOAT) {
    const bool is_int = cls == H5T_INTEGER;
    if (n == 1) {
      if (is_int) {
        int64_t v = 0;
        H5_CHECK(H5Aread(attr, H5T_NATIVE_INT64, &v));
        return v;
      }
      double v = 0;
      H5_CHECK(H5Aread(attr, H5T_NATIVE_DOUBLE, &v));
      return v;
    }
    std::string s = "[";
    if (is_int) {
      std::vector<int64_t> v(n);
      if (n > 0) H5_CHECK(H5Aread(attr, H5T_NATIVE_INT64, v.data()));
      for (hssize_t i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    } else {
      std::vector<double> v(n);
      if (n > 0) H5_CHECK(H5Aread(attr, H5T_NATIVE_DOUBLE, v.data()));
      for (hssize_t i = 0; i < n; ++i) s += (i ? ", " : "") + format_double(v[i]);
    }
    return s + "]";
  }
  if (cls == H5T_STRING && n == 1) {
    const htri_t vlen = H5_CHECK(H5Tis_variable_str(type));
    if (vlen) {
      Handle mem = vlen_string_type();
      char* p = nullptr;
      H5_CHECK(H5Aread(attr, mem, &p));
      std::string s = p ? p : "";
      if (p) H5free_memory(p);
      return s;
    }
    const size_t size = H5Tget_size(type);
    Handle mem(H5_CHECK(H5Tcopy(H5T_C_S1)));
    H5_CHECK(H5Tset_size(mem, size));
    H5_CHECK(H5Tset_strpad(mem, H5T_STR_NULLPAD));
    std::string s(size, '\0');
    H5_CHECK(H5Aread(attr, mem, s.data()));
    s.resize(std::strlen(s.c_str()));
    if (H5Tget_strpad(type) == H5T_STR_SPACEPAD)
      while (!s.empty() && s.back() == ' ') s.pop_back();
    return s;
  }
  return fmt::format("<{} x {}>", n, dtype_name(type));
}

herr_t collect_attr_name(hid_t, const char* name, const H5A_info_t*, void* data) {
  static_cast<std::vector<std::string>*>(data)->push_back(name);
  return 0;
}

}  // namespace

void write_attributes(hid_t obj, const Attributes& attrs) {
  Handle scalar(H5_CHECK(H5Screate(H5S_SCALAR)));
  for (const auto& [name, value] : attrs) {
    if (H5_CHECK(H5Aexists(obj, name.c_str()))) H5_CHECK(H5Adelete(obj, name.c_str()));
    if (const auto* i = std::get_if<int64_t>(&value)) {
      Handle a(
          H5_CHECK(H5Acreate2(obj, name.c_str(), H5T_STD_I64LE, scalar, H5P_DEFAULT, H5P_DEFAULT)));
      H5_CHECK(H5Awrite(a, H5T_NATIVE_INT64, i));
    } else if (const auto* d = std::get_if<double>(&value)) {
      Handle a(H5_CHECK(
          H5Acreate2(obj, name.c_str(), H5T_IEEE_F64LE, scalar, H5P_DEFAULT, H5P_DEFAULT)));
      H5_CHECK(H5Awrite(a, H5T_NATIVE_DOUBLE, d));
    } else {
      const std::string& s = std::get<std::string>(value);
      Handle t = vlen_string_type();
      Handle a(H5_CHECK(H5Acreate2(obj, name.c_str(), t, scalar, H5P_DEFAULT, H5P_DEFAULT)));
      const char* p = s.c_str();
      H5_CHECK(H5Awrite(a, t, &p));
    }
  }
}

Attributes read_attributes(hid_t obj) {
  std::vector<std::string> names;
  hsize_t idx = 0;
  H5_CHECK(H5Aiterate2(obj, H5_INDEX_NAME, H5_ITER_INC, &idx, collect_attr_name, &names));
  Attributes out;
  for (const auto& name : names) {
    Handle a(H5_CHECK(H5Aopen(obj, name.c_str(), H5P_DEFAULT)));
    out[name] = read_attribute(a, name);
  }
  return out;
}

std::string attr_to_string(const AttrValue& v) {
  if (const auto* i = std::get_if<int64_t>(&v)) return std::to_string(*i);
  if (const auto* d = std::get_if<double>(&v)) return format_double(*d);
  return "\"" + std::get<std::string>(v) + "\"";
}

// ---- objects ------------------------------------------------------------------------------------

void require_sound_numeric_type(hid_t type, const std::string& what) {
  const H5T_class_t cls = H5Tget_class(type);
  if (cls != H5T_INTEGER && cls != H5T_FLOAT) return;
  const size_t bits = 8 * H5Tget_size(type), precision = H5Tget_precision(type);
  const int offset = H5Tget_offset(type);
  bool sound =
      bits > 0 && bits <= 128 && precision > 0 && offset >= 0 && size_t(offset) + precision <= bits;
  if (sound && cls == H5T_FLOAT) {
    size_t spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
    sound = H5Tget_fields(type, &spos, &epos, &esize, &mpos, &msize) >= 0 && spos < precision &&
            esize > 0 && esize < 64 && epos + esize <= precision && mpos + msize <= precision;
  }
  if (!sound) {
    const UserFileScope* f = current_scope;
    throw UsageError(
        fmt::format("{}{} has a damaged datatype ({} bytes, {} bits of precision at "
                    "offset {}); the file is corrupt",
                    f ? f->what_ + " " + f->path_ + ": " : "", what, bits / 8, precision, offset));
  }
}

std::string dtype_name(hid_t type) {
  const size_t size = H5Tget_size(type);
  switch (H5Tget_class(type)) {
    case H5T_INTEGER:
      return (H5Tget_sign(type) == H5T_SGN_NONE ? "uint" : "int") + std::to_string(8 * size);
    case H5T_FLOAT:
      return "float" + std::to_string(8 * size);
    case H5T_STRING:
      return "string";
    case H5T_COMPOUND:
      return "compound";
    case H5T_ENUM:
      return "enum";
    case H5T_ARRAY:
      return "array";
    case H5T_VLEN:
      return "vlen";
    case H5T_OPAQUE:
      return "opaque";
    case H5T_REFERENCE:
      return "reference";
    case H5T_BITFIELD:
      return "bitfield";
    default:
      return "unknown";
  }
}

std::vector<int64_t> dataset_shape(hid_t dset) {
  Handle space(H5_CHECK(H5Dget_space(dset)));
  const int rank = H5_CHECK(H5Sget_simple_extent_ndims(space));
  std::vector<hsize_t> dims(rank);
  if (rank > 0) H5_CHECK(H5Sget_simple_extent_dims(space, dims.data(), nullptr));
  return std::vector<int64_t>(dims.begin(), dims.end());
}

std::vector<std::string> attribute_changes(const Attributes& before, const Attributes& now,
                                           bool only_common) {
  std::vector<std::string> changes;
  for (const auto& [key, value] : now) {
    auto it = before.find(key);
    if (it == before.end()) {
      if (!only_common) changes.push_back(key + " (unset) -> " + attr_to_string(value));
    } else if (it->second != value) {
      changes.push_back(key + " " + attr_to_string(it->second) + " -> " + attr_to_string(value));
    }
  }
  if (!only_common)
    for (const auto& [key, value] : before)
      if (!now.count(key)) changes.push_back(key + " " + attr_to_string(value) + " -> (unset)");
  return changes;
}

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(shape[i]);
  }
  return s + ")";
}

bool path_exists(hid_t loc, const std::string& path) {
  QuietErrors quiet;
  std::string prefix;
  std::stringstream ss(path);
  for (std::string part; std::getline(ss, part, '/');) {
    if (part.empty()) continue;
    prefix += (prefix.empty() ? "" : "/") + part;
    if (H5Lexists(loc, prefix.c_str(), H5P_DEFAULT) <= 0) return false;
    if (H5Oexists_by_name(loc, prefix.c_str(), H5P_DEFAULT) <= 0) return false;
  }
  return !prefix.empty();
}

namespace {

// depth bounds the walk in files whose hard links form a cycle.
void visit(hid_t group, const std::string& prefix, int depth, std::vector<ObjectInfo>& out) {
  if (depth > 64) return;
  H5G_info_t info;
  H5_CHECK(H5Gget_info(group, &info));
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t len = H5_CHECK(
        H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT));
    std::string name(len, '\0');
    H5_CHECK(H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), len + 1,
                                H5P_DEFAULT));
    hid_t obj = -1;
    {
      QuietErrors quiet;
      obj = H5Oopen(group, name.c_str(), H5P_DEFAULT);
    }
    if (obj < 0) continue;
    Handle o(obj);
    ObjectInfo oi;
    oi.path = prefix.empty() ? name : prefix + "/" + name;
    const H5I_type_t kind = H5Iget_type(o);
    if (kind == H5I_DATASET) {
      oi.is_dataset = true;
      oi.shape = dataset_shape(o);
      Handle t(H5_CHECK(H5Dget_type(o)));
      oi.dtype = dtype_name(t);
      out.push_back(oi);
    } else if (kind == H5I_GROUP) {
      out.push_back(oi);
      visit(o, oi.path, depth + 1, out);
    }
  }
}

}  // namespace

std::vector<ObjectInfo> list_objects(hid_t file) {
  std::vector<ObjectInfo> out;
  Handle root(H5_CHECK(H5Gopen2(file, "/", H5P_DEFAULT)));
  visit(root, "", 0, out);
  return out;
}

Handle lcpl_intermediate() {
  Handle lcpl(H5_CHECK(H5Pcreate(H5P_LINK_CREATE)));
  H5_CHECK(H5Pset_create_intermediate_group(lcpl, 1));
  return lcpl;
}

}  // namespace mpitron::io
