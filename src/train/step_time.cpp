#include "src/train/step_time.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <toml.hpp>

#include "base/check.hpp"
#include "src/model/family.hpp"
#include "src/pipeline/schedule.hpp"
#include "src/train/memory_plan.hpp"

namespace mpitron {

namespace {

double number_at(const toml::value& table, const std::string& path, const std::string& section,
                 const std::string& key) {
  if (!table.contains(key))
    throw UsageError(fmt::format("network file {}: [{}] has no {}", path, section, key));
  const toml::value& v = toml::find(table, key);
  double x = 0;
  if (v.is_floating())
    x = v.as_floating();
  else if (v.is_integer())
    x = double(v.as_integer());
  else
    throw UsageError(fmt::format("network file {}: [{}] {} is not a number", path, section, key));
  if (!std::isfinite(x) || x < 0)
    throw UsageError(
        fmt::format("network file {}: [{}] {} must be a number >= 0", path, section, key));
  return x;
}

LinkModel link_at(const toml::value& root, const std::string& path, const std::string& section) {
  if (!root.contains(section) || !toml::find(root, section).is_table())
    throw UsageError(fmt::format(
        "network file {}: no [{}] table (expected [intra_node] and [inter_node], each with "
        "alpha_s and beta_s_per_byte)",
        path, section));
  const toml::value& t = toml::find(root, section);
  return {number_at(t, path, section, "alpha_s"), number_at(t, path, section, "beta_s_per_byte")};
}

// How many of `groups` (world ranks each) cross nodes with a member on the busiest node: rings that
// share its network link. 0 when none crosses.
int crossing_share(const std::vector<std::vector<int>>& groups, const Placement& place) {
  std::map<int, int> per_node;
  for (const std::vector<int>& g : groups) {
    std::set<int> nodes;
    for (int r : g) nodes.insert(place.node_of(r));
    if (nodes.size() < 2) continue;
    for (int n : nodes) ++per_node[n];
  }
  int share = 0;
  for (const auto& [_, n] : per_node) share = std::max(share, n);
  return share;
}

std::string link_name(bool across) {
  return across ? "inter-node" : "intra-node";
}

}  // namespace

NetworkModel load_network_model(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw UsageError(
        fmt::format("network file '{}' not found (bench/network_model.sh measures one; "
                    "bench/network-vcluster.toml is an example)",
                    path));
  toml::value root;
  try {
    std::ifstream file(path, std::ios::binary);
    root = toml::parse(file, path);
  } catch (const std::exception& e) {
    const std::string what = e.what();
    throw UsageError(
        fmt::format("network file {}: not valid TOML: {}", path, what.substr(0, what.find('\n'))));
  }
  NetworkModel net;
  net.intra_node = link_at(root, path, "intra_node");
  net.inter_node = link_at(root, path, "inter_node");
  if (root.contains("note") && toml::find(root, "note").is_string())
    net.note = toml::find<std::string>(root, "note");
  return net;
}

std::string check_placement(const comm::GridShape& grid, const Placement& place) {
  if (place.nodes < 1 || place.ranks_per_node < 1)
    return fmt::format("--nodes {} --ranks-per-node {}: both must be at least 1", place.nodes,
                       place.ranks_per_node);
  const int world = grid.dp * grid.tp * grid.pp;
  if (world % place.ranks_per_node != 0)
    return fmt::format(
        "--ranks-per-node {} does not divide the layout's {} ranks (dp {} x tp {} x pp {})",
        place.ranks_per_node, world, grid.dp, grid.tp, grid.pp);
  if (world != place.nodes * place.ranks_per_node)
    return fmt::format(
        "--nodes {} x --ranks-per-node {} = {} ranks, but the layout has {} (dp {} x tp {} x pp "
        "{}): give --dp {} or other nodes",
        place.nodes, place.ranks_per_node, place.nodes * place.ranks_per_node, world, grid.dp,
        grid.tp, grid.pp, place.nodes * place.ranks_per_node / (grid.tp * grid.pp));
  if (place.ranks_per_node % grid.tp != 0)
    return fmt::format(
        "a TP group of {} ranks would span nodes at --ranks-per-node {} (its all-reduces run every "
        "layer: keep tp a divisor of the ranks per node)",
        grid.tp, place.ranks_per_node);
  return "";
}

double StepTimePrediction::total() const {
  double t = 0;
  for (const StepTimeTerm& x : terms) t += x.seconds;
  return t;
}

double StepTimePrediction::communication() const {
  double t = 0;
  for (const StepTimeTerm& x : terms)
    if (x.name != "compute" && x.name != "pipeline bubble") t += x.seconds;
  return t;
}

double ring_allreduce_seconds(double bytes, int p, const LinkModel& link, double share) {
  if (p <= 1) return 0;
  return 2.0 * (p - 1) / p * bytes * link.beta_s_per_byte * share + 2.0 * (p - 1) * link.alpha_s;
}

StepTimePrediction predict_step_time(const StepTimeInputs& in, const NetworkModel& net) {
  const comm::GridShape& g = in.grid;
  MPITRON_REQUIRE(check_placement(g, in.place).empty(), check_placement(g, in.place));
  const int world = g.dp * g.tp * g.pp;
  StepTimePrediction p;

  // Ranks beyond a node's cores share them: each runs at 1 / slowdown of a core, in its compute
  // and in its collectives (every member moves and adds bytes with its CPU at once).
  const double slowdown =
      in.cores_per_node > 0 ? std::max(1.0, in.place.ranks_per_node / in.cores_per_node) : 1.0;
  const std::string shared_cores =
      slowdown > 1 ? fmt::format(" x {:.3g} ({} ranks on {:.3g} cores a node)", slowdown,
                                 in.place.ranks_per_node, in.cores_per_node)
                   : "";
  const double compute = in.compute_step_s / world * slowdown;
  const double b = in.bubble_fraction;
  p.terms.push_back({"compute", compute,
                     fmt::format("{:.4g} s / {} ranks{}", in.compute_step_s, world, shared_cores)});
  p.terms.push_back({"pipeline bubble", b < 1 ? compute * b / (1 - b) : 0,
                     fmt::format("compute x {:.3g}/(1-{:.3g})", b, b)});

  // DP: every DP ring at once, the slowest (largest stage, or a ring across nodes) setting the
  // time.
  {
    std::vector<std::vector<int>> groups;
    for (int r = 0; r < world; ++r)
      if (comm::grid_coords(g, r).dp_rank == 0) groups.push_back(comm::dp_group_ranks(g, r));
    const int share = crossing_share(groups, in.place);
    const bool across = share > 0;
    const LinkModel& link = across ? net.inter_node : net.intra_node;
    double bytes = 0;
    for (double x : in.grad_bytes) bytes = std::max(bytes, x);
    p.terms.push_back(
        {"DP gradient all-reduce",
         ring_allreduce_seconds(bytes, g.dp, link, across ? share : 1) * slowdown,
         g.dp > 1
             ? fmt::format("ring of {} over {} link{}, {:.4g} MB{}{}", g.dp, link_name(across),
                           share > 1 ? fmt::format(" shared by {} rings", share) : "", bytes / 1e6,
                           shared_cores, in.dp_note.empty() ? "" : "; " + in.dp_note)
             : "dp 1"});
  }
  // TP: inside a node (check_placement), the slowest stage's all-reduces of every micro-batch.
  {
    double t = 0;
    int most = 0;
    for (int n : in.tp_allreduces) most = std::max(most, n);
    if (g.tp > 1)
      t = double(most) * in.micro_batches *
          ring_allreduce_seconds(in.tp_message_bytes, g.tp, net.intra_node) * slowdown;
    p.terms.push_back({"TP all-reduces", t,
                       g.tp > 1
                           ? fmt::format("{} x {} micro-batches x ring of {} over intra-node link, "
                                         "{:.4g} MB{}{}",
                                         most, in.micro_batches, g.tp, in.tp_message_bytes / 1e6,
                                         shared_cores, in.tp_note.empty() ? "" : "; " + in.tp_note)
                           : "tp 1"});
  }
  // PP: the messages on the schedule's critical path, one forward and one backward each time the
  // last micro-batch's slot passes a boundary: 2 (m + pp - 2), over the slowest boundary. Not
  // slowed by shared cores: one end of such a message waits for it, idle.
  {
    double t = 0;
    std::string detail = "pp 1";
    if (g.pp > 1) {
      std::vector<std::vector<int>> pairs;
      for (int r = 0; r < world; ++r) {
        const comm::GridCoords c = comm::grid_coords(g, r);
        if (c.pp_rank + 1 < g.pp)
          pairs.push_back({r, comm::grid_rank(g, {c.dp_rank, c.tp_rank, c.pp_rank + 1})});
      }
      const int share = crossing_share(pairs, in.place);
      const bool across = share > 0;
      const LinkModel& link = across ? net.inter_node : net.intra_node;
      const int messages = 2 * (in.micro_batches + g.pp - 2);
      t = messages *
          (link.alpha_s + in.pp_message_bytes * link.beta_s_per_byte * (across ? share : 1));
      detail = fmt::format("{} messages of {:.4g} MB over {} link{}", messages,
                           in.pp_message_bytes / 1e6, link_name(across),
                           share > 1 ? fmt::format(" shared by {} pairs", share) : "");
    }
    p.terms.push_back({"PP sends", t, detail});
  }
  // The tied embedding: the first and the last stage add their parts of its gradient, every
  // (dp, tp) pair at once (a ring of 2).
  {
    double t = 0;
    std::string detail = "no tied parameter";
    if (g.pp > 1 && in.tied_bytes > 0) {
      std::vector<std::vector<int>> pairs;
      for (int r = 0; r < world; ++r) {
        const comm::GridCoords c = comm::grid_coords(g, r);
        if (c.pp_rank == 0)
          pairs.push_back({r, comm::grid_rank(g, {c.dp_rank, c.tp_rank, g.pp - 1})});
      }
      const int share = crossing_share(pairs, in.place);
      const bool across = share > 0;
      const LinkModel& link = across ? net.inter_node : net.intra_node;
      t = ring_allreduce_seconds(in.tied_bytes, 2, link, across ? share : 1) * slowdown;
      detail = fmt::format("ring of 2 over {} link{}, {:.4g} MB{}", link_name(across),
                           share > 1 ? fmt::format(" shared by {} pairs", share) : "",
                           in.tied_bytes / 1e6, shared_cores);
    }
    p.terms.push_back({"tied embedding", t, detail});
  }
  return p;
}

StepTimeInputs step_time_inputs(const TrainOptions& opts, const Placement& place,
                                double compute_step_s, double cores_per_node) {
  const Layout& L = opts.layout;
  MPITRON_REQUIRE(L.dp > 0, "step_time_inputs needs the layout's dp");
  StepTimeInputs in;
  in.grid = {L.dp * L.tp * L.pp, L.dp, L.tp, L.pp};
  in.place = place;
  if (const std::string why = check_placement(in.grid, place); !why.empty()) throw UsageError(why);
  const TrainConfig& tc = opts.cfg.train;
  in.micro_batches = tc.micro_batches;
  in.bubble_fraction =
      pipeline::theoretical_bubble({L.schedule, L.pp, tc.micro_batches, L.virtual_stages});
  in.compute_step_s = compute_step_s;
  in.cores_per_node = cores_per_node;

  const ModelFamily& family = model_family(opts.cfg.model.type);
  if (const std::string why = missing_memory_plan(opts); !why.empty())
    throw UsageError("no step-time prediction: " + why);
  const DataKind data = family.data(opts.cfg.model);
  const bool transformer = opts.cfg.model.type == "gpt" || opts.cfg.model.type == "bert";
  for (int s = 0; s < L.pp; ++s) {
    const ModelBuild how = stage_model_build(opts, data, s, 0, 0);
    const ModelMemory m = family.memory(opts.cfg.model, how);
    in.grad_bytes.push_back(double(m.flat_size) * sizeof(float));
    if (s == 0 && m.first_and_last) in.tied_bytes = double(m.first_and_last_elements) * 4.0;
    if (s == 0) {
      in.pp_message_bytes = double(how.micro_rows) * double(m.boundary_elements) *
                            (opts.precision == DType::f32 ? 4.0 : 2.0);
      if (transformer)
        in.tp_message_bytes =
            double(how.micro_rows) * tc.seq_len * double(opts.cfg.model.get("n_embd")) * 4.0;
    }
    int blocks = 0;
    if (transformer)
      for (const BlockRange& c : how.slice.chunks)
        blocks += std::min(c.end, int(opts.cfg.model.get("n_layer"))) - c.begin;
    // Two all-reduces a block forward (attention, MLP), two backward, two more when recomputed.
    in.tp_allreduces.push_back(transformer ? blocks * (L.recompute ? 6 : 4) : 0);
  }
  if (L.dp > 1 && L.dp_reduce == DpReduce::allreduce)
    in.dp_note =
        "MPI_Allreduce picks its own algorithm, not always a ring (Open MPI's at 3 ranks moved "
        "about 4 gradients through a link): --dp-reduce ring runs one";
  if (!transformer && L.tp > 1)
    in.tp_note = fmt::format("the {} family's TP all-reduces are not modelled", family.type);
  else if (transformer && L.tp > 1)
    in.tp_note = "the vocabulary-parallel embedding and loss not modelled";
  return in;
}

std::string step_time_text(const StepTimeInputs& in, const NetworkModel& net,
                           const StepTimePrediction& p) {
  const comm::GridShape& g = in.grid;
  std::string s = fmt::format(
      "step time predicted by the alpha-beta model: dp {} x tp {} x pp {} on {} nodes x {} ranks, "
      "{} micro-batches\n",
      g.dp, g.tp, g.pp, in.place.nodes, in.place.ranks_per_node, in.micro_batches);
  s += fmt::format("  intra-node link: alpha {:.4g} s, beta {:.4g} s/byte ({:.4g} GB/s)\n",
                   net.intra_node.alpha_s, net.intra_node.beta_s_per_byte,
                   net.intra_node.beta_s_per_byte > 0 ? 1e-9 / net.intra_node.beta_s_per_byte : 0);
  s += fmt::format("  inter-node link: alpha {:.4g} s, beta {:.4g} s/byte ({:.4g} GB/s)\n",
                   net.inter_node.alpha_s, net.inter_node.beta_s_per_byte,
                   net.inter_node.beta_s_per_byte > 0 ? 1e-9 / net.inter_node.beta_s_per_byte : 0);
  if (!net.note.empty()) s += fmt::format("  network: {}\n", net.note);
  for (const StepTimeTerm& t : p.terms)
    s += fmt::format("{:<24} {:12.6f} s  ({})\n", t.name, t.seconds, t.detail);
  s += fmt::format("{:<24} {:12.6f} s\n", "communication", p.communication());
  s += fmt::format("{:<24} {:12.6f} s  (predicted by the alpha-beta model)\n", "total step",
                   p.total());
  return s;
}

double median_step_seconds(const std::vector<double>& step_s) {
  std::vector<double> v;
  for (size_t i = step_s.size() > 1 ? 1 : 0; i < step_s.size(); ++i)
    if (std::isfinite(step_s[i]) && step_s[i] > 0) v.push_back(step_s[i]);
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace mpitron
