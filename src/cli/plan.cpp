// mpitron plan: the memory plan of `train`'s settings, on one process (src/train/memory_plan.hpp),
// and with --nodes the step time the alpha-beta model predicts (src/train/step_time.hpp).
#include <fmt/format.h>

#include <filesystem>

#include "io/trace.hpp"
#include "src/cli/cli.hpp"
#include "src/model/config.hpp"
#include "src/train/memory_plan.hpp"
#include "src/train/step_time.hpp"
#ifdef MPITRON_HAVE_CUDA
#include "src/cuda/device_query.hpp"
#endif

namespace mpitron::cli {

namespace {

// Checked before the memory plan so that bad input is the one line it prints.
struct StepTimePlan {
  NetworkModel net;
  double compute_step_s = 0;
};

StepTimePlan step_time_plan(const PlanNetworkArgs& n) {
  const bool any = n.nodes > 0 || n.ranks_per_node > 0 || !n.network.empty() ||
                   n.compute_step_s > 0 || !n.compute_trace.empty();
  if (!any) return {};
  if (n.nodes <= 0 || n.ranks_per_node <= 0 || n.network.empty())
    throw UsageError(
        "the step-time prediction needs --nodes, --ranks-per-node and --network together (and "
        "--compute-step-s or --compute-trace)");
  if ((n.compute_step_s > 0) == !n.compute_trace.empty())
    throw UsageError(
        "the step-time prediction needs the compute time: --compute-step-s SECONDS or "
        "--compute-trace TRACE (one of them)");
  StepTimePlan p;
  p.net = load_network_model(n.network);
  p.compute_step_s = n.compute_step_s;
  if (!n.compute_trace.empty()) {
    const std::string path = std::filesystem::is_directory(n.compute_trace)
                                 ? (std::filesystem::path(n.compute_trace) / "trace.h5").string()
                                 : n.compute_trace;
    p.compute_step_s = median_step_seconds(io::read_trace(path).step_s);
    if (!(p.compute_step_s > 0))
      throw UsageError(fmt::format("--compute-trace {}: no step_s in its rows", path));
  }
  return p;
}

}  // namespace

int cmd_plan(TrainArgs a, const PlanNetworkArgs& n) {
  if (a.help_config) {
    fmt::print("{}", config_keys_help());
    return 0;
  }
  TrainOptions opts = train_options(a, false);
  validate_config(opts.cfg);
  const bool predict = n.nodes > 0 || n.ranks_per_node > 0 || !n.network.empty() ||
                       n.compute_step_s > 0 || !n.compute_trace.empty();
  // no job to infer dp from: the nodes' ranks, else 1
  if (opts.layout.dp == 0)
    opts.layout.dp = predict && n.nodes > 0 && n.ranks_per_node > 0 &&
                             n.nodes * n.ranks_per_node % (opts.layout.tp * opts.layout.pp) == 0
                         ? n.nodes * n.ranks_per_node / (opts.layout.tp * opts.layout.pp)
                         : 1;
  resolve_bitwise(opts);
  check_layout(opts);
  const StepTimePlan st = step_time_plan(n);
  StepTimeInputs inputs;
  if (predict)
    inputs =
        step_time_inputs(opts, {n.nodes, n.ranks_per_node}, st.compute_step_s, n.cores_per_node);
#ifdef MPITRON_HAVE_CUDA
  // cuDNN chooses the convolutions' algorithms, and so their workspace, on a GPU only.
  const std::string& type = opts.cfg.model.type;
  if (opts.device == Device::cuda && (type == "alexnet" || type == "resnet")) {
    const cuda::DeviceQuery q = cuda::query_devices();
    if (q.devices.empty())
      throw UsageError(fmt::format(
          "mpitron plan --device cuda for {}: cuDNN chooses the convolutions' algorithms (and so "
          "their workspace) on a GPU, and there is none here ({}); plan where the job runs",
          type, q.reason));
  }
#endif
  const MemoryPlan plan = plan_memory(opts);
  fmt::print("{}", memory_plan_text(opts, plan, opts.max_device_memory));
  if (predict)
    fmt::print("\n{}", step_time_text(inputs, st.net, predict_step_time(inputs, st.net)));
  return opts.max_device_memory > 0 && plan.peak() > opts.max_device_memory ? 1 : 0;
}

}  // namespace mpitron::cli
