#include "io/compare_bits.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <map>

#include "base/check.hpp"
#include "io/h5.hpp"
#include "io/trace.hpp"

namespace mpitron::io {

namespace {

std::string kind_of(const std::string& path) {
  Handle f = open_user_file(path, "file");
  if (path_exists(f, "trace/step")) return "trace";
  if (path_exists(f, "params")) return "checkpoint";
  throw UsageError(fmt::format("{} is neither an mpitron trace nor a checkpoint", path));
}

bool same_bits(double x, double y) {
  return std::memcmp(&x, &y, sizeof x) == 0;
}

BitComparison compare_traces_bits(const std::string& a, const std::string& b) {
  const Trace ta = read_trace(a), tb = read_trace(b);
  BitComparison c{"trace", 0, {}};
  std::map<int64_t, size_t> rows_b;
  for (size_t j = 0; j < tb.step.size(); ++j) rows_b.emplace(tb.step[j], j);
  std::map<int64_t, size_t> rows_a;
  for (size_t i = 0; i < ta.step.size(); ++i) rows_a.emplace(ta.step[i], i);
  for (const auto& row : rows_a) {
    const int64_t step = row.first;  // no structured binding: the lambda below captures these
    const size_t i = row.second;
    const auto it = rows_b.find(step);
    if (it == rows_b.end()) {
      c.differences.push_back(fmt::format("step {}: only in {}", step, a));
      continue;
    }
    const size_t j = it->second;
    ++c.compared;
    auto check = [&](const char* name, const std::vector<double>& x, const std::vector<double>& y) {
      if (!same_bits(x[i], y[j]) && !(std::isnan(x[i]) && std::isnan(y[j])))
        c.differences.push_back(fmt::format("step {}: {} {:.17g} against {:.17g} ({:+.3e})", step,
                                            name, x[i], y[j], y[j] - x[i]));
    };
    check("loss", ta.loss, tb.loss);
    check("val_loss", ta.val_loss, tb.val_loss);
    check("val_accuracy", ta.val_accuracy, tb.val_accuracy);
    check("val_bleu", ta.val_bleu, tb.val_bleu);
    check("lr", ta.lr, tb.lr);
    check("grad_norm", ta.grad_norm, tb.grad_norm);
    check("loss_scale", ta.loss_scale, tb.loss_scale);
    if (ta.skipped[i] != tb.skipped[j])
      c.differences.push_back(
          fmt::format("step {}: skipped {} against {}", step, ta.skipped[i], tb.skipped[j]));
  }
  for (const auto& [step, j] : rows_b)
    if (!rows_a.count(step)) c.differences.push_back(fmt::format("step {}: only in {}", step, b));
  return c;
}

// A dataset's bytes in its stored type (native byte order).
std::vector<unsigned char> dataset_bytes(hid_t file, const std::string& name, size_t& element) {
  Handle d(H5_CHECK(H5Dopen2(file, name.c_str(), H5P_DEFAULT)));
  Handle stored(H5_CHECK(H5Dget_type(d)));
  Handle native(H5_CHECK(H5Tget_native_type(stored, H5T_DIR_ASCEND)));
  element = H5Tget_size(native);
  std::vector<unsigned char> bytes(size_t(numel(dataset_shape(d))) * element);
  if (!bytes.empty()) H5_CHECK(H5Dread(d, native, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data()));
  return bytes;
}

BitComparison compare_checkpoint_bits(const std::string& a, const std::string& b) {
  BitComparison c{"checkpoint", 0, {}};
  Handle fa = open_user_file(a, "checkpoint"), fb = open_user_file(b, "checkpoint");
  const Attributes ra = read_attributes(fa), rb = read_attributes(fb);
  const auto sa = ra.find("step"), sb = rb.find("step");
  if (sa == ra.end() || sb == rb.end() || attr_to_string(sa->second) != attr_to_string(sb->second))
    c.differences.push_back(fmt::format("step {} against {}",
                                        sa == ra.end() ? "(none)" : attr_to_string(sa->second),
                                        sb == rb.end() ? "(none)" : attr_to_string(sb->second)));
  std::map<std::string, ObjectInfo> in_b;
  for (const ObjectInfo& o : list_objects(fb))
    if (o.is_dataset) in_b.emplace(o.path, o);
  std::map<std::string, bool> seen;
  for (const ObjectInfo& o : list_objects(fa)) {
    if (!o.is_dataset) continue;
    seen[o.path] = true;
    const auto it = in_b.find(o.path);
    if (it == in_b.end()) {
      c.differences.push_back(fmt::format("{}: only in {}", o.path, a));
      continue;
    }
    ++c.compared;
    if (o.shape != it->second.shape || o.dtype != it->second.dtype) {
      c.differences.push_back(fmt::format("{}: {} {} against {} {}", o.path, o.dtype,
                                          shape_string(o.shape), it->second.dtype,
                                          shape_string(it->second.shape)));
      continue;
    }
    size_t ea = 0, eb = 0;
    const std::vector<unsigned char> x = dataset_bytes(fa, o.path, ea),
                                     y = dataset_bytes(fb, o.path, eb);
    if (x == y) continue;
    size_t differ = 0, first = SIZE_MAX;
    for (size_t k = 0; k < x.size() / ea; ++k)
      if (std::memcmp(&x[k * ea], &y[k * ea], ea) != 0) {
        ++differ;
        if (first == SIZE_MAX) first = k;
      }
    std::string values;
    if (ea == sizeof(float) && o.dtype == "float32") {
      float u, v;
      std::memcpy(&u, &x[first * ea], ea);
      std::memcpy(&v, &y[first * ea], ea);
      values = fmt::format(" (first at element {}: {:.9g} against {:.9g})", first, u, v);
    }
    c.differences.push_back(
        fmt::format("{}: {} of {} elements differ{}", o.path, differ, x.size() / ea, values));
  }
  for (const auto& [path, info] : in_b)
    if (!seen.count(path)) c.differences.push_back(fmt::format("{}: only in {}", path, b));
  return c;
}

}  // namespace

BitComparison compare_bits(const std::string& a, const std::string& b) {
  const std::string ka = kind_of(a), kb = kind_of(b);
  if (ka != kb)
    throw UsageError(
        fmt::format("{} is a {} and {} a {}: compare two traces or two checkpoints", a, ka, b, kb));
  return ka == "trace" ? compare_traces_bits(a, b) : compare_checkpoint_bits(a, b);
}

}  // namespace mpitron::io
