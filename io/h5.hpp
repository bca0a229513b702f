// Thin layer over the HDF5 C API shared by traces, checkpoints and `mpitron info`: the H5_CHECK
// macro, an owning id handle, scalar attributes that round-trip exactly, and opening user files
// with a clear UsageError instead of HDF5's error stack. Only HDF5 functions that are the same in
// 1.10, 1.12 and 1.14 are used (no versioned H5Literate/H5Oget_info), so clusters' builds work.
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "base/check.hpp"

namespace mpitron::io {

// Scalar attribute: int64 <-> H5T_STD_I64LE, double <-> H5T_IEEE_F64LE, string <-> variable-length
// UTF-8 string (h5py reads it as str). Readers map any integer to int64 and any float to double.
using AttrValue = std::variant<int64_t, double, std::string>;
using Attributes = std::map<std::string, AttrValue>;

// Innermost and outermost messages of the current HDF5 error stack, for H5_CHECK reports.
std::string h5_error_reason();
// The system's message inside a reason (strerror of a failed open or write), else the reason.
std::string system_message(const std::string& reason);

// Reports a failed HDF5 call. Normally an internal failure: "[rank r] file:line call: reason" and
// the job aborted (fail_at). Inside a UserFileScope (reading a file the user named) it throws
// UsageError instead, since there a failure means the file's content is damaged.
[[noreturn]] void h5_fail(const char* file, int line, const char* call);

// Returns value; a negative value (failure of any herr_t/hid_t/htri_t/ssize_t call) -> h5_fail.
template <typename T>
T h5_checked(T value, const char* file, int line, const char* call) {
  if (value < 0) h5_fail(file, line, call);
  return value;
}

// An HDF5 call failed on a file being written (UserFileScope::writing): a full disk, a size limit.
struct H5WriteError : UsageError {
  using UsageError::UsageError;
};

// While alive on this thread, H5_CHECK failures throw UsageError("<what> <path> is not a
// readable HDF5 file (truncated or corrupt?): call: reason"), or for a file being written
// (H5WriteError "cannot write <what> <path> (is its disk full?): call: reason"). Only for
// non-collective I/O, or where a failure then ends the job (MPI_Abort):
// a throw on one rank inside a collective would leave the others waiting.
class UserFileScope {
 public:
  enum Mode { reading, writing };
  UserFileScope(const std::string& path, const std::string& what, Mode mode = reading);
  ~UserFileScope();
  UserFileScope(const UserFileScope&) = delete;
  UserFileScope& operator=(const UserFileScope&) = delete;

 private:
  std::string path_, what_;
  Mode mode_;
  const UserFileScope* prev_;
  friend void h5_fail(const char*, int, const char*);
  friend void require_sound_numeric_type(hid_t, const std::string&);
};

}  // namespace mpitron::io

// Every HDF5 call whose failure is a bug or a broken system (not bad user input) goes through
// this; it is an expression yielding the call's result: hid_t f = H5_CHECK(H5Fcreate(...));
#define H5_CHECK(call) ::mpitron::io::h5_checked((call), __FILE__, __LINE__, #call)

namespace mpitron::io {

// Owns one HDF5 identifier of any kind (file, group, dataset, dataspace, type, property list,
// attribute) and closes it with the matching H5?close. Move-only; invalid (-1) when empty.
class Handle {
 public:
  Handle() = default;
  explicit Handle(hid_t id) : id_(id) {}
  Handle(Handle&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)) {}
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() { reset(); }

  hid_t get() const { return id_; }
  operator hid_t() const { return id_; }
  bool valid() const { return id_ >= 0; }
  // Closes now; a failing close (e.g. of a file whose final write fails) is an internal failure.
  void close();
  void reset() noexcept;  // close, ignoring failure (destructors)

 private:
  hid_t id_ = H5I_INVALID_HID;
};

// While alive, HDF5 prints nothing on failure (users see only our message); restores the previous
// automatic error handler when destroyed. H5_CHECK still reports the stack's messages.
class QuietErrors {
 public:
  QuietErrors();
  ~QuietErrors();
  QuietErrors(const QuietErrors&) = delete;
  QuietErrors& operator=(const QuietErrors&) = delete;

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

// File access property list with our defaults: file locking (HDF5 >= 1.10.7) that tolerates file
// systems without flock (some Lustre mounts), or none when lock is false, so that readers (h5py,
// `mpitron info`) can open a file another process keeps open for writing.
Handle default_fapl(bool lock = true);

// Opens a file the user named for reading (or read-write) with the given fapl (default_fapl when
// invalid). Throws UsageError "<what> PATH does not exist" / "... is not an HDF5 file" /
// "... is not a readable HDF5 file (truncated or corrupt?)". `what` is e.g. "checkpoint".
Handle open_user_file(const std::string& path, const std::string& what, bool read_write = false,
                      hid_t fapl = H5I_INVALID_HID);

// True when `path` begins with the HDF5 signature at offset 0, 512, 1024, 2048, ... (a user
// block); false for other files or when it cannot be read.
bool has_hdf5_signature(const std::string& path);

// Writes attrs on an object (file root, group or dataset), replacing same-named attributes.
void write_attributes(hid_t obj, const Attributes& attrs);
// Reads every attribute of obj. Scalars keep their type; non-scalar numeric attributes (written
// by other tools) are rendered as a string "[a, b, ...]", other kinds as "<type>".
Attributes read_attributes(hid_t obj);
std::string attr_to_string(const AttrValue& v);  // 42, 0.001, "text" (quoted)
// "key old -> new" for each key whose value differs, "key (unset) -> new" and "key old ->
// (unset)" for keys only one side has (unless only_common), in key order.
std::vector<std::string> attribute_changes(const Attributes& before, const Attributes& now,
                                           bool only_common = false);

// One object found by list_objects.
struct ObjectInfo {
  std::string path;  // relative to the root, no leading '/': "params/wte.weight"
  bool is_dataset = false;
  std::vector<int64_t> shape;  // datasets only ({} for scalar)
  std::string dtype;           // datasets only: float32, float64, int64, string, ...
};
// Every group and dataset below the root, depth first in name order (links that cannot be opened,
// e.g. dangling soft links, are skipped).
std::vector<ObjectInfo> list_objects(hid_t file);

// True when every component of `path` (relative, '/'-separated) exists as a link and resolves.
bool path_exists(hid_t loc, const std::string& path);
std::vector<int64_t> dataset_shape(hid_t dset);
std::string dtype_name(hid_t type);
// Throws UsageError("<file>: <what> has a damaged datatype ...") when an integer or float type's
// bit fields do not fit its size: HDF5 1.10 converts such types past the end of its buffers.
void require_sound_numeric_type(hid_t type, const std::string& what);
std::string shape_string(const std::vector<int64_t>& shape);  // "(384,128)", "()" for scalars
int64_t numel(const std::vector<int64_t>& shape);             // elements; 1 for scalars

// Link creation property list that creates missing intermediate groups.
Handle lcpl_intermediate();

}  // namespace mpitron::io
