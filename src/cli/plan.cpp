// mpitron plan: the memory plan of `train`'s settings, on one process (src/train/memory_plan.hpp).
#include <fmt/format.h>

#include "src/cli/cli.hpp"
#include "src/model/config.hpp"
#include "src/train/memory_plan.hpp"
#ifdef MPITRON_HAVE_CUDA
#include "src/cuda/device_query.hpp"
#endif

namespace mpitron::cli {

int cmd_plan(TrainArgs a) {
  if (a.help_config) {
    fmt::print("{}", config_keys_help());
    return 0;
  }
  TrainOptions opts = train_options(a, false);
  validate_config(opts.cfg);
  if (opts.layout.dp == 0) opts.layout.dp = 1;  // no job to infer it from
  check_layout(opts);
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
  return opts.max_device_memory > 0 && plan.peak() > opts.max_device_memory ? 1 : 0;
}

}  // namespace mpitron::cli
