// `mpitron info` summaries and `mpitron compare` trace comparison.
#include "io/inspect.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "base/human_units.hpp"
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

// "1 element", "3 elements".
std::string count_of(int64_t n, const std::string& what) {
  return std::to_string(n) + " " + what + (n == 1 ? "" : "s");
}

// "2..3 tensors", or count_of when lo == hi.
std::string range_of(int64_t lo, int64_t hi, const std::string& what) {
  return lo == hi ? count_of(lo, what)
                  : std::to_string(lo) + ".." + std::to_string(hi) + " " + what + "s";
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// Summary lines are "label:" in a column of this width, then the content.
constexpr size_t kLabel = 12;
constexpr size_t kWidth = 100;

std::string label(const std::string& name) {
  std::string s = name + ":";
  return s + std::string(s.size() < kLabel ? kLabel - s.size() : 1, ' ');
}

// Cells start on multiples of `stop` after the label so settings line up across groups; a long
// cell spans several stops, and lines wrap before kWidth.
void print_grid(const std::string& name, const std::vector<std::string>& cells, size_t stop,
                std::ostream& out) {
  std::string line = label(name);
  size_t col = 0;  // of the line's content, after the label
  bool empty = true;
  for (const std::string& c : cells) {
    const size_t at = empty ? 0 : (col + 2 + stop - 1) / stop * stop;
    if (!empty && kLabel + at + c.size() > kWidth) {
      out << line << "\n";
      line = std::string(kLabel, ' ');
      col = 0;
      empty = true;
    }
    if (!empty) {
      line += std::string(at - col, ' ');
      col = at;
    }
    line += c;
    col += c.size();
    empty = false;
  }
  out << line << "\n";
}

// One "key=value" cell per attribute, `first` keys leading in the given order.
std::vector<std::string> cells_of(const Attributes& attrs, const std::vector<std::string>& first) {
  std::vector<std::string> cells;
  for (const std::string& k : first)
    if (auto it = attrs.find(k); it != attrs.end())
      cells.push_back(k + "=" + attr_to_string(it->second));
  for (const auto& [k, v] : attrs)
    if (std::find(first.begin(), first.end(), k) == first.end())
      cells.push_back(k + "=" + attr_to_string(v));
  return cells;
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

// Non-empty and only digits, at most 9 (so it fits an int64 and is an index, not a hash).
bool is_index(const std::string& s) {
  return !s.empty() && s.size() <= 9 &&
         std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// k of a trace's "segments/<k>" group; -1 for any other path.
int64_t segment_index(const std::string& path) {
  const std::string prefix = "segments/";
  if (!starts_with(path, prefix) || !is_index(path.substr(prefix.size()))) return -1;
  return std::stoll(path.substr(prefix.size()));
}

// "segment k: from step S, <what changed since segment k-1>" for each /segments/<k> of a trace.
void print_segments(hid_t file, const std::vector<ObjectInfo>& objects, std::ostream& out) {
  std::map<int64_t, Attributes> segments;
  for (const ObjectInfo& o : objects)
    if (!o.is_dataset && segment_index(o.path) >= 0) {
      Handle g(H5_CHECK(H5Gopen2(file, o.path.c_str(), H5P_DEFAULT)));
      segments[segment_index(o.path)] = read_attributes(g);
    }
  const Attributes* prev = nullptr;
  for (auto& [k, a] : segments) {
    out << "segment " << k << ": from step ";
    if (auto it = a.find("first_step"); it != a.end()) {
      out << attr_to_string(it->second);
      a.erase(it);
    } else {
      out << "?";
    }
    if (prev) {
      const std::vector<std::string> changes = attribute_changes(*prev, a);
      if (changes.empty()) out << ", no setting changed";
      for (const std::string& c : changes) out << ", " << c;
    }
    out << "\n";
    prev = &a;
  }
}

struct Tensor {
  std::string name;  // below its group: "h.0.attn.c_attn.weight", "wte.weight/m"
  std::vector<int64_t> shape;
  int64_t n = 0;
};

// Elements in all the tensors.
int64_t total(const std::vector<Tensor>& ts) {
  int64_t n = 0;
  for (const Tensor& t : ts) n += t.n;
  return n;
}

// A parameter's place in a stack of repeated blocks: the name split at its first all-digit dotted
// component, "h.3.attn.c_attn.weight" -> ("h", 3, "attn.c_attn.weight").
struct BlockName {
  std::string prefix, rest;
  int64_t index = -1;  // -1: the name has no numeric component
};

BlockName block_name(const std::string& name) {
  size_t begin = 0;
  while (begin <= name.size()) {
    size_t end = name.find('.', begin);
    if (end == std::string::npos) end = name.size();
    const std::string part = name.substr(begin, end - begin);
    if (is_index(part))
      return {begin ? name.substr(0, begin - 1) : "", end < name.size() ? name.substr(end + 1) : "",
              std::stoll(part)};
    begin = end + 1;
  }
  return {name, "", -1};
}

std::string block_label(const std::string& prefix, int64_t index) {
  return prefix.empty() ? std::to_string(index) : prefix + "." + std::to_string(index);
}

// The pattern a repeated tensor shares with its siblings: "h.*.attn.c_attn.weight".
std::string block_pattern(const BlockName& b) {
  std::string s = b.prefix.empty() ? "*" : b.prefix + ".*";
  return b.rest.empty() ? s : s + "." + b.rest;
}

void print_blocks(const std::vector<Tensor>& params, std::ostream& out) {
  // prefix -> index -> (rest, shape) of each tensor of that block
  std::map<std::string, std::map<int64_t, std::vector<std::pair<std::string, std::string>>>> stacks;
  std::map<std::string, std::map<int64_t, int64_t>> elements;
  std::vector<const Tensor*> outside;
  for (const Tensor& t : params) {
    const BlockName b = block_name(t.name);
    if (b.index < 0) {
      outside.push_back(&t);
      continue;
    }
    stacks[b.prefix][b.index].emplace_back(b.rest, shape_string(t.shape));
    elements[b.prefix][b.index] += t.n;
  }
  if (stacks.empty()) return;
  bool first = true;
  for (auto& [prefix, blocks] : stacks) {
    for (auto& [i, tensors] : blocks) std::sort(tensors.begin(), tensors.end());
    const int64_t lo = blocks.begin()->first, hi = blocks.rbegin()->first;
    const auto nb = static_cast<int64_t>(blocks.size());
    size_t tmin = SIZE_MAX, tmax = 0;
    int64_t emin = INT64_MAX, emax = 0, esum = 0;
    bool alike = true;
    for (const auto& [i, tensors] : blocks) {
      tmin = std::min(tmin, tensors.size());
      tmax = std::max(tmax, tensors.size());
      const int64_t e = elements[prefix][i];
      emin = std::min(emin, e);
      emax = std::max(emax, e);
      esum += e;
      alike = alike && tensors == blocks.begin()->second;
    }
    out << (first ? label("blocks") : std::string(kLabel, ' ')) << block_label(prefix, lo);
    if (nb > 1) out << " .. " << block_label(prefix, hi);
    if (hi - lo + 1 != nb) out << " (with gaps)";
    out << ": " << count_of(nb, "block") << " x ";
    if (alike)
      out << count_of(static_cast<int64_t>(tmax), "tensor") << ", " << count_of(emax, "element")
          << (nb > 1 ? " each" : "");
    else
      out << range_of(static_cast<int64_t>(tmin), static_cast<int64_t>(tmax), "tensor") << ", "
          << range_of(emin, emax, "element") << " (blocks differ), " << esum << " in all";
    out << "\n";
    first = false;
  }
  if (!outside.empty()) {
    std::vector<const Tensor*> named = outside;
    std::sort(named.begin(), named.end(),
              [](const Tensor* a, const Tensor* b) { return a->name < b->name; });
    int64_t n = 0;
    for (const Tensor* t : outside) n += t->n;
    out << std::string(kLabel, ' ')
        << "outside blocks: " << count_of(static_cast<int64_t>(outside.size()), "tensor") << ", "
        << count_of(n, "element") << " (";
    const size_t shown = std::min<size_t>(named.size(), 6);
    for (size_t i = 0; i < shown; ++i) out << (i ? ", " : "") << named[i]->name;
    if (shown < named.size()) out << ", ...";
    out << ")\n";
  }
}

// The largest parameters, tensors repeated across blocks listed once with their count.
void print_largest(const std::vector<Tensor>& params, size_t how_many, std::ostream& out) {
  struct Entry {
    std::string name, shape;  // name: the pattern, or the tensor's own name when it is alone
    int64_t n = 0, count = 0;
  };
  std::map<std::pair<std::string, std::string>, Entry> by_pattern;
  for (const Tensor& t : params) {
    const BlockName b = block_name(t.name);
    const std::string name = b.index < 0 ? t.name : block_pattern(b);
    Entry& e = by_pattern[{name, shape_string(t.shape)}];
    e.name = e.count == 0 ? t.name : name;
    e.shape = shape_string(t.shape);
    e.n = t.n;
    ++e.count;
  }
  std::vector<Entry> entries;
  for (auto& [key, e] : by_pattern) entries.push_back(e);
  std::stable_sort(entries.begin(), entries.end(),
                   [](const Entry& a, const Entry& b) { return a.n > b.n; });
  entries.resize(std::min(entries.size(), how_many));
  size_t wn = 0, ws = 0;
  for (const Entry& e : entries) {
    wn = std::max(wn, e.name.size());
    ws = std::max(ws, e.shape.size());
  }
  bool first = true;
  for (const Entry& e : entries) {
    out << (first ? label("largest") : std::string(kLabel, ' ')) << e.name
        << std::string(wn - e.name.size() + 2, ' ') << e.shape
        << std::string(ws - e.shape.size() + 2, ' ') << count_of(e.n, "element");
    if (e.count > 1) out << " x " << e.count;
    out << "\n";
    first = false;
  }
}

void print_checkpoint_summary(hid_t file, const std::vector<ObjectInfo>& objects,
                              const Attributes& root, std::ostream& out) {
  // Run settings grouped by the prefix before the first dot; plain keys (config, seed) are "run".
  std::map<std::string, Attributes> groups;
  for (const auto& [k, v] : root) {
    if (k == "format_version" || k == "step" || k == "tokens_seen") continue;
    const size_t dot = k.find('.');
    if (dot == std::string::npos || dot == 0 || dot + 1 == k.size())
      groups["run"][k] = v;
    else
      groups[k.substr(0, dot)][k.substr(dot + 1)] = v;
  }
  std::vector<std::string> order = {"model", "run", "train", "eval", "layout"};
  for (const auto& [g, a] : groups)
    if (std::find(order.begin(), order.end(), g) == order.end()) order.push_back(g);
  std::vector<std::pair<std::string, std::vector<std::string>>> rows;
  for (const std::string& g : order)
    if (auto it = groups.find(g); it != groups.end())
      rows.emplace_back(g, cells_of(it->second, {"type", "config"}));
  for (const ObjectInfo& o : objects) {
    if (o.is_dataset) continue;
    Handle g(H5_CHECK(H5Gopen2(file, o.path.c_str(), H5P_DEFAULT)));
    const Attributes a = read_attributes(g);
    if (!a.empty()) rows.emplace_back("/" + o.path, cells_of(a, {}));
  }
  size_t stop = 0;
  for (const auto& [g, cells] : rows)
    for (const std::string& c : cells)
      if (c.size() <= 24) stop = std::max(stop, c.size() + 2);
  if (stop == 0) stop = 12;
  for (const auto& [g, cells] : rows) print_grid(g, cells, stop, out);

  std::vector<Tensor> params, buffers, moments, codes;  // codes: 8-bit AdamW's /optim8bit
  std::map<std::string, int64_t> dtypes;
  size_t ndata = 0, others = 0;
  for (const ObjectInfo& o : objects) {
    if (!o.is_dataset) continue;
    ++ndata;
    ++dtypes[o.dtype];
    const Tensor t{o.path.substr(o.path.find('/') + 1), o.shape, numel(o.shape)};
    if (starts_with(o.path, "params/"))
      params.push_back(t);
    else if (starts_with(o.path, "buffers/"))
      buffers.push_back(t);
    else if (starts_with(o.path, "optim/"))
      moments.push_back(t);
    else if (starts_with(o.path, "optim8bit/"))
      codes.push_back(t);
    else
      ++others;
  }
  out << label("datasets") << ndata << " (";
  bool first = true;
  for (const auto& [dtype, count] : dtypes) {
    out << (first ? "" : ", ") << dtype;
    if (dtypes.size() > 1) out << " x " << count;
    first = false;
  }
  out << ")";
  if (others) out << ", " << others << " outside /params, /optim, /optim8bit, /buffers";
  out << "\n";

  const int64_t np = total(params);
  out << "parameters: " << np << " in " << params.size() << " tensors under /params ("
      << human_bytes(4.0 * double(np)) << " as float32)\n";
  // optim/<param>/<moment>: which moments exist, and for how many of the parameters.
  std::map<std::string, int64_t> per_moment;
  for (const Tensor& t : moments) {
    const size_t slash = t.name.rfind('/');
    ++per_moment[slash == std::string::npos ? std::string("?") : t.name.substr(slash + 1)];
  }
  out << label("optimizer");
  if (moments.empty() && !codes.empty()) {
    // pp<s>_tp<t>/{m,v}_codes (uint8, one per flat element) and {m,v}_absmax (float32).
    int64_t code_bytes = 0, absmax_bytes = 0;
    for (const Tensor& t : codes)
      (t.name.find("_codes") != std::string::npos ? code_bytes : absmax_bytes) += t.n;
    absmax_bytes *= 4;
    out << "8-bit AdamW state under /optim8bit in " << codes.size() / 4
        << " (stage, TP rank) groups: " << human_bytes(double(code_bytes)) << " of codes, "
        << human_bytes(double(absmax_bytes)) << " of block absmax values\n";
  } else if (moments.empty()) {
    out << "no moments under /optim\n";
  } else {
    const int64_t nm = total(moments);
    out << nm << " in " << moments.size() << " tensors under /optim ("
        << human_bytes(4.0 * double(nm)) << "): ";
    std::string names;
    bool same = true;
    for (const auto& [m, count] : per_moment) {
      names += (names.empty() ? "" : ", ") + m;
      same = same && count == per_moment.begin()->second;
    }
    const int64_t each = per_moment.begin()->second;
    if (same)
      out << "moments " << names << " of "
          << (each == static_cast<int64_t>(params.size())
                  ? std::string("every parameter")
                  : std::to_string(each) + " of " + std::to_string(params.size()) + " parameters");
    else {
      out << "moments";
      for (auto it = per_moment.begin(); it != per_moment.end(); ++it)
        out << (it == per_moment.begin() ? " " : ", ") << it->first << " of " << it->second;
      out << " of " << params.size() << " parameters";
    }
    out << "\n";
  }
  out << label("buffers");
  if (buffers.empty())
    out << "none\n";
  else
    out << total(buffers) << " in " << count_of(static_cast<int64_t>(buffers.size()), "tensor")
        << " under /buffers (" << human_bytes(4.0 * double(total(buffers))) << " as float32)\n";
  print_blocks(params, out);
  print_largest(params, 5, out);
  out << "(a summary; --all lists every attribute and dataset)\n";
}

}  // namespace

void print_info(const std::string& path, std::ostream& out, bool full) {
  Handle file = open_user_file(path, "file");
  UserFileScope scope(path, "file");
  const bool is_trace = path_exists(file, "trace/step") && path_exists(file, "trace/loss");
  const bool is_ckpt = !is_trace && path_exists(file, "params");
  const Attributes root = read_attributes(file);
  const std::vector<ObjectInfo> objects = list_objects(file);
  out << path << ": "
      << (is_trace  ? "mpitron loss trace"
          : is_ckpt ? "mpitron checkpoint"
                    : "HDF5 file (not an mpitron trace or checkpoint)");
  if (is_ckpt && !full) {
    for (const char* k : {"step", "tokens_seen", "format_version"})
      if (auto it = root.find(k); it != root.end())
        out << ", " << (std::string(k) == "tokens_seen" ? "tokens seen" : k) << " "
            << attr_to_string(it->second);
    out << "\n";
    print_checkpoint_summary(file, objects, root, out);
    return;
  }
  out << "\n";

  if (!root.empty()) {
    out << "attributes:\n";
    print_attributes(root, "  ", out);
  }
  size_t w = 0, ndata = 0;
  for (const ObjectInfo& o : objects)
    if (o.is_dataset) {
      w = std::max(w, o.path.size());
      ++ndata;
    }
  for (const ObjectInfo& o : objects) {
    // A trace's segments repeat the root attributes; the summary says what changed instead.
    if (o.is_dataset || (is_trace && !full && segment_index(o.path) >= 0)) continue;
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
      params += numel(o.shape);
      ++param_tensors;
    }
  }
  if (is_ckpt)
    out << "parameters: " << params << " in " << param_tensors << " tensors under /params\n";
  if (is_trace) {
    print_trace_summary(path, out);
    print_segments(file, objects, out);
  }
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
