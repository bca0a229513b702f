// Loss trace writer (rank 0, buffered, flushed every N rows) and reader.
#include "io/trace.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <stdexcept>
#include <type_traits>

namespace mpitron::io {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr int64_t kMissing = -1;  // fill of int64 columns: row or rank not recorded

struct Column {
  const char* name;
  int64_t TraceRow::*i;  // exactly one of i, d is set
  double TraceRow::*d;
};

constexpr Column kColumns[] = {
    {"step", &TraceRow::step, nullptr},
    {"loss", nullptr, &TraceRow::loss},
    {"val_loss", nullptr, &TraceRow::val_loss},
    {"val_accuracy", nullptr, &TraceRow::val_accuracy},
    {"val_bleu", nullptr, &TraceRow::val_bleu},
    {"lr", nullptr, &TraceRow::lr},
    {"grad_norm", nullptr, &TraceRow::grad_norm},
    {"tokens_per_s", nullptr, &TraceRow::tokens_per_s},
    {"step_s", nullptr, &TraceRow::step_s},
    {"comm_bytes", &TraceRow::comm_bytes, nullptr},
    {"peak_mem_bytes", &TraceRow::peak_mem_bytes, nullptr},
    {"param_bytes", &TraceRow::param_bytes, nullptr},
    {"bubble", nullptr, &TraceRow::bubble},
    {"loss_scale", nullptr, &TraceRow::loss_scale},
    {"skipped", &TraceRow::skipped, nullptr},
};

struct MatrixColumn {
  const char* name;
  std::vector<int64_t> TraceRow::*field;
};

constexpr MatrixColumn kMatrices[] = {
    {"rank_comm_bytes", &TraceRow::rank_comm_bytes},
    {"rank_peak_mem_bytes", &TraceRow::rank_peak_mem_bytes},
    {"rank_param_bytes", &TraceRow::rank_param_bytes},
    {"rank_busy_us", &TraceRow::rank_busy_us},
    {"rank_grad_sync_us", &TraceRow::rank_grad_sync_us},
    {"rank_activation_bytes", &TraceRow::rank_activation_bytes},
    {"rank_planned_mem_bytes", &TraceRow::rank_planned_mem_bytes},
};

// Creates an extendible 1-D column of `rows` fill values.
void create_column(hid_t group, const Column& c, int64_t rows) {
  const hsize_t dims[1] = {static_cast<hsize_t>(rows)}, maxdims[1] = {H5S_UNLIMITED};
  Handle space(H5_CHECK(H5Screate_simple(1, dims, maxdims)));
  Handle dcpl(H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)));
  const hsize_t chunk[1] = {1024};
  H5_CHECK(H5Pset_chunk(dcpl, 1, chunk));
  if (c.i) {
    H5_CHECK(H5Pset_fill_value(dcpl, H5T_NATIVE_INT64, &kMissing));
    Handle d(
        H5_CHECK(H5Dcreate2(group, c.name, H5T_STD_I64LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT)));
  } else {
    H5_CHECK(H5Pset_fill_value(dcpl, H5T_NATIVE_DOUBLE, &kNaN));
    Handle d(
        H5_CHECK(H5Dcreate2(group, c.name, H5T_IEEE_F64LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT)));
  }
}

// Creates an extendible (rows, width) int64 matrix of fill values; chunks of about 128 KiB.
void create_matrix(hid_t group, const char* name, int64_t rows, int64_t width) {
  const hsize_t dims[2] = {static_cast<hsize_t>(rows), static_cast<hsize_t>(width)};
  const hsize_t maxdims[2] = {H5S_UNLIMITED, H5S_UNLIMITED};
  Handle space(H5_CHECK(H5Screate_simple(2, dims, maxdims)));
  Handle dcpl(H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)));
  const hsize_t c1 = std::clamp<hsize_t>(width, 1, 256);
  const hsize_t chunk[2] = {std::max<hsize_t>(64, 16384 / c1), c1};
  H5_CHECK(H5Pset_chunk(dcpl, 2, chunk));
  H5_CHECK(H5Pset_fill_value(dcpl, H5T_NATIVE_INT64, &kMissing));
  Handle d(H5_CHECK(H5Dcreate2(group, name, H5T_STD_I64LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT)));
}

bool has_link(hid_t group, const char* name) {
  return H5_CHECK(H5Lexists(group, name, H5P_DEFAULT)) > 0;
}

// Writes `count` values from buf into rows [first, first+count) of a 1-D dataset, growing it.
void write_rows(hid_t dset, hid_t memtype, int64_t first, const void* buf, int64_t count) {
  const hsize_t newdims[1] = {static_cast<hsize_t>(first + count)};
  H5_CHECK(H5Dset_extent(dset, newdims));
  if (count == 0) return;
  Handle fspace(H5_CHECK(H5Dget_space(dset)));
  const hsize_t start[1] = {static_cast<hsize_t>(first)}, cnt[1] = {static_cast<hsize_t>(count)};
  H5_CHECK(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, nullptr, cnt, nullptr));
  Handle mspace(H5_CHECK(H5Screate_simple(1, cnt, nullptr)));
  H5_CHECK(H5Dwrite(dset, memtype, mspace, fspace, H5P_DEFAULT, buf));
}

}  // namespace

TraceWriter::TraceWriter(const std::string& path, const Attributes& attrs,
                         int64_t resume_after_step, int flush_every)
    : path_(path), flush_every_(std::max(1, flush_every)) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool resume = resume_after_step >= 0 && fs::exists(path, ec);
  if (resume) {
    Handle fapl = default_fapl(/*lock=*/false);
    file_ = open_user_file(path, "trace", /*read_write=*/true, fapl);
    UserFileScope scope(path, "trace");
    if (!path_exists(file_, "trace/step"))
      throw UsageError("trace " + path + " is not an mpitron trace (no /trace/step); move it " +
                       "away to start a new trace");
    group_ = Handle(H5_CHECK(H5Gopen2(file_, "trace", H5P_DEFAULT)));
    Handle step(H5_CHECK(H5Dopen2(group_, "step", H5P_DEFAULT)));
    const std::vector<int64_t> shape = dataset_shape(step);
    if (shape.size() != 1)
      throw UsageError("trace " + path + " has /trace/step of shape " + shape_string(shape) +
                       "; expected one dimension (not an mpitron trace?)");
    {
      Handle type(H5_CHECK(H5Dget_type(step)));
      require_sound_numeric_type(type, "/trace/step");
    }
    std::vector<int64_t> steps(shape[0]);
    if (!steps.empty())
      H5_CHECK(H5Dread(step, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, steps.data()));
    rows_ =
        std::find_if(steps.begin(), steps.end(), [&](int64_t s) { return s > resume_after_step; }) -
        steps.begin();
    open_or_create_columns();
  } else {
    UserFileScope scope(path, "trace", UserFileScope::writing);
    const fs::path parent = fs::path(path).parent_path();
    if (!parent.empty()) fs::create_directories(parent, ec);
    Handle fapl = default_fapl(/*lock=*/false);
    QuietErrors quiet;
    const hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    if (f < 0)
      throw UsageError(fmt::format(
          "cannot create trace {}: {} (is its folder writable, its disk not full, and the file "
          "not open in another run?)",
          path, system_message(h5_error_reason())));
    file_ = Handle(f);
    group_ = Handle(H5_CHECK(H5Gcreate2(file_, "trace", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
    open_or_create_columns();
  }
  UserFileScope scope(path, "trace", UserFileScope::writing);
  write_attributes(file_, attrs);
  record_segment(attrs, resume ? resume_after_step + 1 : 1);
  H5_CHECK(H5Fflush(file_, H5F_SCOPE_GLOBAL));
}

// /segments/<k>: one group per run of the trace (the first and each resume), with that run's
// attributes and the step it started at; segments at or after a resume point are dropped with
// the rows they wrote.
void TraceWriter::record_segment(const Attributes& attrs, int64_t first_step) {
  if (!has_link(file_, "segments"))
    Handle(H5_CHECK(H5Gcreate2(file_, "segments", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
  Handle segments(H5_CHECK(H5Gopen2(file_, "segments", H5P_DEFAULT)));
  int k = 0;
  for (; has_link(segments, std::to_string(k).c_str()); ++k) {
    Handle g(H5_CHECK(H5Gopen2(segments, std::to_string(k).c_str(), H5P_DEFAULT)));
    const Attributes a = read_attributes(g);
    auto it = a.find("first_step");
    if (it != a.end() && std::holds_alternative<int64_t>(it->second) &&
        std::get<int64_t>(it->second) >= first_step)
      break;
  }
  for (int later = k; has_link(segments, std::to_string(later).c_str()); ++later)
    H5_CHECK(H5Ldelete(segments, std::to_string(later).c_str(), H5P_DEFAULT));
  Handle g(H5_CHECK(
      H5Gcreate2(segments, std::to_string(k).c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
  Attributes a = attrs;
  a["first_step"] = first_step;
  write_attributes(g, a);
}

// Brings every column to exactly rows_ rows: truncates longer ones (resume), pads shorter or
// missing ones with fill values.
void TraceWriter::open_or_create_columns() {
  for (const Column& c : kColumns) {
    if (!has_link(group_, c.name)) {
      create_column(group_, c, rows_);
      continue;
    }
    Handle d(H5_CHECK(H5Dopen2(group_, c.name, H5P_DEFAULT)));
    if (dataset_shape(d).size() != 1)
      throw UsageError("trace " + path_ + " has /trace/" + c.name +
                       " with more than one dimension (not an mpitron trace?)");
    const hsize_t dims[1] = {static_cast<hsize_t>(rows_)};
    H5_CHECK(H5Dset_extent(d, dims));
  }
  for (const MatrixColumn& m : kMatrices) {
    if (!has_link(group_, m.name)) continue;
    Handle d(H5_CHECK(H5Dopen2(group_, m.name, H5P_DEFAULT)));
    const std::vector<int64_t> shape = dataset_shape(d);
    if (shape.size() != 2)
      throw UsageError("trace " + path_ + " has /trace/" + m.name +
                       " that is not 2-D (not an mpitron trace?)");
    const hsize_t dims[2] = {static_cast<hsize_t>(rows_), static_cast<hsize_t>(shape[1])};
    H5_CHECK(H5Dset_extent(d, dims));
  }
}

TraceWriter::~TraceWriter() {
  try {
    if (file_.valid()) {
      flush();
      group_.reset();
      file_.reset();
    }
  } catch (...) {
  }
}

void TraceWriter::append(const TraceRow& row) {
  pending_.push_back(row);
  if (static_cast<int>(pending_.size()) >= flush_every_) flush();
}

void TraceWriter::write_matrix(const char* name, std::vector<int64_t> TraceRow::*field) {
  int64_t width = 0;
  for (const TraceRow& r : pending_) width = std::max<int64_t>(width, (r.*field).size());
  const bool exists = has_link(group_, name);
  if (!exists && width == 0) return;
  if (!exists) create_matrix(group_, name, rows_, width);
  Handle d(H5_CHECK(H5Dopen2(group_, name, H5P_DEFAULT)));
  width = std::max(width, dataset_shape(d)[1]);
  const int64_t b = static_cast<int64_t>(pending_.size());
  const hsize_t dims[2] = {static_cast<hsize_t>(rows_ + b), static_cast<hsize_t>(width)};
  H5_CHECK(H5Dset_extent(d, dims));
  if (width == 0) return;
  // Every new row is written in full (-1 for absent ranks), so nothing depends on what a
  // truncated-then-regrown chunk holds.
  std::vector<int64_t> buf(b * width, kMissing);
  for (int64_t i = 0; i < b; ++i) {
    const std::vector<int64_t>& v = pending_[i].*field;
    std::copy(v.begin(), v.end(), buf.begin() + i * width);
  }
  Handle fspace(H5_CHECK(H5Dget_space(d)));
  const hsize_t start[2] = {static_cast<hsize_t>(rows_), 0};
  const hsize_t count[2] = {static_cast<hsize_t>(b), static_cast<hsize_t>(width)};
  H5_CHECK(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, nullptr, count, nullptr));
  Handle mspace(H5_CHECK(H5Screate_simple(2, count, nullptr)));
  H5_CHECK(H5Dwrite(d, H5T_NATIVE_INT64, mspace, fspace, H5P_DEFAULT, buf.data()));
}

void TraceWriter::flush() {
  if (!file_.valid() || pending_.empty()) return;
  // Only rank 0 writes: a failure here is not every rank's UsageError (the others would wait in
  // the next step's collectives); the caller's std::exception path ends the job with its line.
  try {
    QuietErrors quiet;
    UserFileScope scope(path_, "trace", UserFileScope::writing);
    write_pending();
  } catch (const UsageError& e) {
    throw std::runtime_error(e.what());
  }
}

void TraceWriter::write_pending() {
  const int64_t b = static_cast<int64_t>(pending_.size());
  std::vector<int64_t> ibuf(b);
  std::vector<double> dbuf(b);
  for (const Column& c : kColumns) {
    Handle d(H5_CHECK(H5Dopen2(group_, c.name, H5P_DEFAULT)));
    if (c.i) {
      for (int64_t r = 0; r < b; ++r) ibuf[r] = pending_[r].*c.i;
      write_rows(d, H5T_NATIVE_INT64, rows_, ibuf.data(), b);
    } else {
      for (int64_t r = 0; r < b; ++r) dbuf[r] = pending_[r].*c.d;
      write_rows(d, H5T_NATIVE_DOUBLE, rows_, dbuf.data(), b);
    }
  }
  for (const MatrixColumn& m : kMatrices) write_matrix(m.name, m.field);
  H5_CHECK(H5Fflush(file_, H5F_SCOPE_GLOBAL));
  rows_ += b;
  pending_.clear();
}

// ---- reading ------------------------------------------------------------------------------------

namespace {

// Reads the first n values of /trace/<name> (converted to T), padding with fill.
template <typename T>
std::vector<T> read_column(hid_t group, const std::string& path, const char* name, int64_t n,
                           T fill) {
  std::vector<T> out(n, fill);
  if (!has_link(group, name)) return out;
  Handle d(H5_CHECK(H5Dopen2(group, name, H5P_DEFAULT)));
  const std::vector<int64_t> shape = dataset_shape(d);
  if (shape.size() != 1)
    throw UsageError("trace " + path + " has /trace/" + name + " of shape " + shape_string(shape) +
                     "; expected one dimension (not an mpitron trace?)");
  const int64_t count = std::min(n, shape[0]);
  if (count == 0) return out;
  {
    Handle type(H5_CHECK(H5Dget_type(d)));
    require_sound_numeric_type(type, "/trace/" + std::string(name));
  }
  Handle fspace(H5_CHECK(H5Dget_space(d)));
  const hsize_t start[1] = {0}, cnt[1] = {static_cast<hsize_t>(count)};
  H5_CHECK(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, nullptr, cnt, nullptr));
  Handle mspace(H5_CHECK(H5Screate_simple(1, cnt, nullptr)));
  const hid_t memtype = std::is_same_v<T, int64_t> ? H5T_NATIVE_INT64 : H5T_NATIVE_DOUBLE;
  H5_CHECK(H5Dread(d, memtype, mspace, fspace, H5P_DEFAULT, out.data()));
  return out;
}

}  // namespace

Trace read_trace(const std::string& path) {
  Handle file = open_user_file(path, "trace", /*read_write=*/false);
  UserFileScope scope(path, "trace");
  if (!path_exists(file, "trace/step") || !path_exists(file, "trace/loss"))
    throw UsageError(path + " is an HDF5 file but not a loss trace (no /trace/step and " +
                     "/trace/loss); pass the trace.h5 of a run");
  Handle group(H5_CHECK(H5Gopen2(file, "trace", H5P_DEFAULT)));
  Trace t;
  {
    Handle d(H5_CHECK(H5Dopen2(group, "step", H5P_DEFAULT)));
    const std::vector<int64_t> shape = dataset_shape(d);
    if (shape.size() != 1)
      throw UsageError("trace " + path + " has /trace/step of shape " + shape_string(shape) +
                       "; expected one dimension (not an mpitron trace?)");
    // Every row takes at least its 8-byte step in the file: a longer extent is corruption.
    const uintmax_t bytes = std::filesystem::file_size(path);
    if (shape[0] < 0 || uintmax_t(shape[0]) > bytes / 8)
      throw UsageError("trace " + path + " claims " + std::to_string(shape[0]) +
                       " rows, more than its " + std::to_string(bytes) +
                       " bytes can hold (a damaged file?)");
    t.step = read_column<int64_t>(group, path, "step", shape[0], kMissing);
  }
  const int64_t n = static_cast<int64_t>(t.step.size());
  t.loss = read_column<double>(group, path, "loss", n, kNaN);
  t.val_loss = read_column<double>(group, path, "val_loss", n, kNaN);
  t.val_accuracy = read_column<double>(group, path, "val_accuracy", n, kNaN);
  t.val_bleu = read_column<double>(group, path, "val_bleu", n, kNaN);
  t.lr = read_column<double>(group, path, "lr", n, kNaN);
  t.grad_norm = read_column<double>(group, path, "grad_norm", n, kNaN);
  t.tokens_per_s = read_column<double>(group, path, "tokens_per_s", n, kNaN);
  t.step_s = read_column<double>(group, path, "step_s", n, kNaN);
  t.bubble = read_column<double>(group, path, "bubble", n, kNaN);
  t.loss_scale = read_column<double>(group, path, "loss_scale", n, kNaN);
  t.skipped = read_column<int64_t>(group, path, "skipped", n, kMissing);
  t.comm_bytes = read_column<int64_t>(group, path, "comm_bytes", n, kMissing);
  t.peak_mem_bytes = read_column<int64_t>(group, path, "peak_mem_bytes", n, kMissing);
  t.param_bytes = read_column<int64_t>(group, path, "param_bytes", n, kMissing);
  t.attrs = read_attributes(file);
  return t;
}

}  // namespace mpitron::io
