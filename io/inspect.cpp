// `mpitron info` summaries and `mpitron compare` trace comparison.
#include "io/inspect.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>

#include "io/h5.hpp"
#include "io/trace.hpp"

namespace mpitron::io {

namespace {

std::string fmt_g(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.7g", x);
  return buf;
}

void print_attributes(const Attributes& attrs, const std::string& indent, std::ostream& out) {
  size_t w = 0;
  for (const auto& [k, v] : attrs) w = std::max(w, k.size());
  for (const auto& [k, v] : attrs)
    out << indent << k << std::string(w - k.size(), ' ') << " = " << attr_to_string(v) << "\n";
}

void print_trace_summary(const std::string& path, std::ostream& out) {
  const Trace t = read_trace(path);
  const size_t n = t.step.size();
  if (n == 0) {
    out << "steps: none recorded\n";
    return;
  }
  out << "steps: " << t.step.front() << " .. " << t.step.back() << " (" << n << " rows)\n";
  out << "loss: first " << fmt_g(t.loss.front()) << " (step " << t.step.front() << "), last "
      << fmt_g(t.loss.back()) << " (step " << t.step.back() << ")\n";
  size_t last_val = n;
  for (size_t i = n; i-- > 0;)
    if (!std::isnan(t.val_loss[i])) {
      last_val = i;
      break;
    }
  if (last_val == n)
    out << "val_loss: never evaluated\n";
  else
    out << "val_loss: last " << fmt_g(t.val_loss[last_val]) << " (step " << t.step[last_val]
        << ")\n";
}

}  // namespace

void print_info(const std::string& path, std::ostream& out) {
  Handle file = open_user_file(path, "file");
  UserFileScope scope(path, "file");
  const bool is_trace = path_exists(file, "trace/step") && path_exists(file, "trace/loss");
  const bool is_ckpt = !is_trace && path_exists(file, "params");
  out << path << ": "
      << (is_trace  ? "mpitron loss trace"
          : is_ckpt ? "mpitron checkpoint"
                    : "HDF5 file (not an mpitron trace or checkpoint)")
      << "\n";

  const Attributes root = read_attributes(file);
  if (!root.empty()) {
    out << "attributes:\n";
    print_attributes(root, "  ", out);
  }
  const std::vector<ObjectInfo> objects = list_objects(file);
  size_t w = 0, ndata = 0;
  for (const ObjectInfo& o : objects)
    if (o.is_dataset) {
      w = std::max(w, o.path.size());
      ++ndata;
    }
  for (const ObjectInfo& o : objects) {
    if (o.is_dataset) continue;
    Handle g(H5_CHECK(H5Gopen2(file, o.path.c_str(), H5P_DEFAULT)));
    const Attributes a = read_attributes(g);
    if (a.empty()) continue;
    out << "group /" << o.path << " attributes:\n";
    print_attributes(a, "  ", out);
  }
  out << "datasets (" << ndata << "):\n";
  int64_t params = 0, param_tensors = 0;
  for (const ObjectInfo& o : objects) {
    if (!o.is_dataset) continue;
    char line[64];
    std::snprintf(line, sizeof line, "  %-8s ", o.dtype.c_str());
    out << "  /" << o.path << std::string(w - o.path.size(), ' ') << line << shape_string(o.shape)
        << "\n";
    if (o.path.rfind("params/", 0) == 0) {
      int64_t n = 1;
      for (int64_t d : o.shape) n *= d;
      params += n;
      ++param_tensors;
    }
  }
  if (is_ckpt)
    out << "parameters: " << params << " in " << param_tensors << " tensors under /params\n";
  if (is_trace) print_trace_summary(path, out);
}

namespace {
double relative_difference(double x, double y) {
  double rel;
  if (std::isnan(x) && std::isnan(y))
    rel = 0;
  else if (std::isnan(x) || std::isnan(y))
    rel = std::numeric_limits<double>::infinity();
  else if (x == y)  // also equal infinities
    rel = 0;
  else
    rel = std::fabs(x - y) / std::max({std::fabs(x), std::fabs(y), 1e-30});
  if (std::isnan(rel)) rel = std::numeric_limits<double>::infinity();  // inf - inf
  return rel;
}
}  // namespace

TraceComparison compare_traces(const std::string& a, const std::string& b) {
  const Trace ta = read_trace(a), tb = read_trace(b);
  TraceComparison c;
  auto rows = [&c](const Trace& t) {
    std::map<int64_t, size_t> by_step;
    for (size_t i = 0; i < t.step.size(); ++i)
      if (!by_step.emplace(t.step[i], i).second) ++c.duplicate_steps;
    return by_step;
  };
  const std::map<int64_t, size_t> la = rows(ta), lb = rows(tb);
  int64_t within = 0;
  for (const auto& [step, i] : la) {
    const auto it = lb.find(step);
    if (it == lb.end()) {
      ++c.steps_only_in_one;
      continue;
    }
    const size_t j = it->second;
    const double rel = relative_difference(ta.loss[i], tb.loss[j]);
    if (!std::isnan(ta.val_loss[i]) && !std::isnan(tb.val_loss[j])) {
      ++c.val_compared;
      c.max_val_rel_diff =
          std::max(c.max_val_rel_diff, relative_difference(ta.val_loss[i], tb.val_loss[j]));
    }
    ++c.steps_compared;
    if (rel <= 0.01) ++within;
    if (c.worst_step < 0 || rel > c.max_rel_diff) {
      c.max_rel_diff = rel;
      c.worst_step = step;
    }
  }
  for (const auto& [step, y] : lb)
    if (!la.count(step)) ++c.steps_only_in_one;
  if (c.steps_compared > 0) c.frac_within_1pct = static_cast<double>(within) / c.steps_compared;
  return c;
}

}  // namespace mpitron::io
