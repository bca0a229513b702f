#include "src/train/memory_plan.hpp"
#include "src/train/reduction_tree.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include "base/check.hpp"
#include "base/human_units.hpp"
#include "src/model/family.hpp"
#include "src/pipeline/executor.hpp"
#include "src/train/adamw.hpp"
#include "src/train/batch_slice.hpp"

namespace mpitron {

size_t StageMemoryPlan::total() const {
  size_t t = 0;
  for (const MemoryPlanItem& i : items) t += i.host ? 0 : i.bytes;
  return t;
}

size_t StageMemoryPlan::host_total() const {
  size_t t = 0;
  for (const MemoryPlanItem& i : items) t += i.host ? i.bytes : 0;
  return t;
}

size_t MemoryPlan::peak() const {
  size_t p = 0;
  for (const StageMemoryPlan& s : stages) p = std::max(p, s.total());
  return p;
}

std::string missing_memory_plan(const TrainOptions& opts) {
  const ModelFamily& family = model_family(opts.cfg.model.type);
  if (!family.memory) return fmt::format("the {} family has no memory plan yet", family.type);
  return "";
}

StageMemoryPlan plan_stage_memory(const TrainOptions& opts, int stage) {
  const ModelFamily& family = model_family(opts.cfg.model.type);
  if (const std::string why = missing_memory_plan(opts); !why.empty())
    throw UsageError(
        fmt::format("no memory plan (mpitron plan, --max-device-memory's check "
                    "before any work): {}",
                    why));
  const Layout& L = opts.layout;
  MPITRON_REQUIRE(L.dp > 0, "plan_stage_memory needs the layout's dp");
  const ModelBuild how = stage_model_build(opts, family.data(opts.cfg.model), stage, 0, 0);
  const ModelMemory m = family.memory(opts.cfg.model, how);
  const size_t f = sizeof(float), flat = m.flat_size;
  const size_t shard = L.zero > 0 ? flat / size_t(L.dp) : flat;
  const TrainConfig& tc = opts.cfg.train;
  // --bitwise: the whole gradient at any ZeRO stage, and one stage's tied embedding's two parts
  // apart (GradSync::leaf_size_), padded to a multiple of dp.
  const size_t leaf = (flat + (L.pp == 1 ? m.first_and_last_elements : 0) + size_t(L.dp) - 1) /
                      size_t(L.dp) * size_t(L.dp);
  size_t grads = tc.bitwise ? leaf : flat;
  if (L.zero == 2 && !tc.bitwise) {  // GradStorage::windowed: the window segments share the largest one's place
    size_t window = 0, others = 0;
    for (const GradSegment& g : m.segments)
      g.window ? window = std::max(window, g.end - g.begin) : others += g.end - g.begin;
    grads = others + window;
  }
  StageMemoryPlan p;
  p.stage = stage;
  auto add = [&](const char* kind, size_t bytes, bool host = false) {
    if (bytes > 0) p.items.push_back({kind, bytes, host});
  };
  const bool master = opts.offload_master;  // the master weights in the host's memory
  const bool off_cpu = opts.device != Device::cpu;
  add(master ? "fp32 parameters (host)" : "fp32 parameters", flat * f, master);
  add("buffers", m.buffer_elements * f);
  add("16-bit weights", m.weight_copy_bytes);
  // Staging buffers hold two chunks: one on its way while the host works on the other.
  add("16-bit staging (host)",
      master && off_cpu ? 2 * std::min(flat, kHostStagingElements) * sizeof(uint16_t) : 0, true);
  add("gradients", grads * f);
  // ZeRO's all-gather scratch beside parameters the host holds (the CPU's, or the offloaded
  // master weights; not the ring's, which gathers in place), and ZeRO 2's summed shard.
  const bool gather_scratch =
      L.zero >= 1 && L.dp > 1 && (master || !off_cpu) && L.dp_reduce != DpReduce::ring;
  add("ZeRO shard scratch", (gather_scratch && !master ? shard : 0) * f +
                                (L.zero == 2 && !tc.bitwise ? shard : 0) * f);
  if (tc.bitwise) {  // GradSync's frontier sums and the tree's top, in the host's memory
    const int per = tc.reduction_shards / L.dp;
    size_t received = 0;
    for (int r = 1; r < L.dp; ++r) received += tree_frontier(tc.reduction_shards, r * per, per).size();
    add("frontier sums (host)",
        (size_t(frontier_peak_buffers(tc.reduction_shards, 0, per)) * leaf +
         (L.dp > 1 ? (received + 1) * (leaf / size_t(L.dp)) : 0) + (off_cpu ? leaf : 0) +
         // interleaved chunks: the segments' frontiers assembled into the whole's
         (L.virtual_stages > 1 ? tree_frontier(tc.reduction_shards, 0, per).size() * leaf : 0)) *
            f,
        true);
  }
  add("ZeRO gather scratch (host)", (gather_scratch && master ? shard : 0) * f, true);
  const size_t state =
      opts.optimizer == Optimizer::adamw8bit ? adamw8bit_state_bytes(shard) : 2 * shard * f;
  add(opts.offload_optimizer ? "optimizer state (host)" : "optimizer state", state,
      opts.offload_optimizer);
  // Off the CPU the host's update stages a chunk of the gradients (and of the parameters).
  const size_t update_chunk = std::min(shard, kHostStagingElements) * f;
  add("update staging (host)",
      opts.offload_optimizer && off_cpu ? 2 * (master ? 1 : 2) * update_chunk : 0, true);
  // Off the CPU, reductions through MPI pass through a host copy of the flat gradients (GradSync's
  // staging): over dp, ZeRO 2's segments at any dp (with its shard's sums), the tied embedding's
  // sum over the first and last stage.
  const bool mpi = opts.comm == CommKind::mpi;
  const bool staged_grads =
      off_cpu && ((L.dp > 1 && mpi) || L.zero == 2 || (m.first_and_last && L.pp > 1 && mpi));
  add("gradient staging (host)", staged_grads ? (flat + (L.zero == 2 ? shard : 0)) * f : 0, true);
  add("activations", m.activation_bytes - m.logit_bytes);
  add("logits", m.logit_bytes);
  // The send buffers the schedule's send plans need (and, off the CPU, the staged receives'): host
  // memory off the CPU, as messages pass through it.
  const bool staged_messages = off_cpu;
  const size_t message_element = opts.precision == DType::f32 ? f : 2;  // the storage type's
  if (L.pp > 1) {
    const pipeline::ScheduleSpec spec{L.schedule, L.pp, opts.cfg.train.micro_batches,
                                      L.virtual_stages};
    const pipeline::SendPlan train = pipeline::send_plan(spec, stage, true),
                             eval = pipeline::send_plan(spec, stage, false);
    const int buffers =
        pipeline::PipelineExecutor::message_buffers({&train, &eval}, staged_messages);
    add(staged_messages ? "pipeline message buffers (host)" : "pipeline send buffers",
        size_t(buffers) * how.micro_rows * m.boundary_elements * message_element, staged_messages);
  }
  return p;
}

MemoryPlan plan_memory(const TrainOptions& opts) {
  MemoryPlan plan;
  for (int s = 0; s < opts.layout.pp; ++s) plan.stages.push_back(plan_stage_memory(opts, s));
  return plan;
}

namespace {

// Settings that fit `cap`, fewest changes first: each combination of recompute, ZeRO 1, 8-bit
// AdamW, optimizer offload and master-weight offload (where they apply) with the fewest
// micro-batches that fits.
std::vector<std::string> fitting_settings(const TrainOptions& opts, size_t cap) {
  const ModelFamily& family = model_family(opts.cfg.model.type);
  const TrainConfig& tc = opts.cfg.train;
  struct Fit {
    int changes;
    std::string line;
  };
  std::vector<Fit> fits;
  for (int knobs = 0; knobs < 32; ++knobs) {
    TrainOptions o = opts;
    if (knobs & 1) o.layout.recompute = true;
    if (knobs & 2) o.layout.zero = 1;
    if (knobs & 4) o.optimizer = Optimizer::adamw8bit;
    if (knobs & 8) o.offload_optimizer = true;
    if (knobs & 16) o.offload_master = true;
    const bool changed[5] = {o.layout.recompute != opts.layout.recompute,
                             o.layout.zero != opts.layout.zero, o.optimizer != opts.optimizer,
                             o.offload_optimizer != opts.offload_optimizer,
                             o.offload_master != opts.offload_master};
    bool useful = true;  // each bit set changes a setting, and the result can run
    for (int k = 0; k < 5; ++k) useful &= !(knobs >> k & 1) || changed[k];
    useful &= !o.offload_master || (o.offload_optimizer && o.precision != DType::f32);
    useful &= !o.layout.recompute || family.recomputes;
    useful &= o.layout.zero == opts.layout.zero || opts.layout.dp > 1;
    if (!useful) continue;
    for (int mb = tc.micro_batches; mb <= tc.batch_size; ++mb) {
      if (!check_batch_split(tc.batch_size, o.layout.dp, mb).empty()) continue;
      if (!pipeline::check_schedule({o.layout.schedule, o.layout.pp, mb, o.layout.virtual_stages})
               .empty())
        continue;
      o.cfg.train.micro_batches = mb;
      const MemoryPlan plan = plan_memory(o);
      if (plan.peak() > cap) continue;
      std::string flags;
      if (mb != tc.micro_batches) flags += fmt::format(" --micro-batches {}", mb);
      if (changed[0]) flags += " --recompute block";
      if (changed[1]) flags += " --zero 1";
      if (changed[2]) flags += " --optimizer adamw8bit";
      if (changed[3] || changed[4])
        flags += o.offload_master ? " --offload optimizer,master" : " --offload optimizer";
      size_t host = 0;
      for (const StageMemoryPlan& st : plan.stages) host = std::max(host, st.host_total());
      fits.push_back(
          {__builtin_popcount(unsigned(knobs)) + (mb != tc.micro_batches),
           fmt::format("  fits:{} ({} per rank{})", flags.empty() ? " as given" : flags,
                       human_bytes(double(plan.peak())),
                       host ? fmt::format(", {} host", human_bytes(double(host))) : "")});
      break;
    }
  }
  std::stable_sort(fits.begin(), fits.end(),
                   [](const Fit& a, const Fit& b) { return a.changes < b.changes; });
  std::vector<std::string> out;
  for (const Fit& f : fits)
    if (out.size() < 6) out.push_back(f.line);
  return out;
}

}  // namespace

std::string memory_plan_text(const TrainOptions& opts, const MemoryPlan& plan, size_t cap) {
  const Layout& L = opts.layout;
  const ModelFamily& family = model_family(opts.cfg.model.type);
  const bool sequences = is_sequence_data(family.data(opts.cfg.model));
  std::string s = fmt::format(
      "memory plan: {} on {}, dp {} x tp {} x pp {}, zero {}, batch {} in {} micro-batches, "
      "{}{}, recompute {}, {}{}\n",
      opts.cfg.name, device_name(opts.device), L.dp, L.tp, L.pp, L.zero, opts.cfg.train.batch_size,
      opts.cfg.train.micro_batches,
      sequences ? fmt::format("seq {}, ", opts.cfg.train.seq_len) : "",
      precision_name(opts.precision), L.recompute ? "block" : "none",
      optimizer_name(opts.optimizer),
      opts.offload_master      ? " and master weights offloaded"
      : opts.offload_optimizer ? " offloaded"
                               : "");
  std::vector<std::string> kinds;
  for (const StageMemoryPlan& st : plan.stages)
    for (const MemoryPlanItem& i : st.items)
      if (std::find(kinds.begin(), kinds.end(), i.kind) == kinds.end()) kinds.push_back(i.kind);
  s += fmt::format("{:<26}", "bytes per rank");
  for (const StageMemoryPlan& st : plan.stages)
    s += fmt::format("{:>14}", fmt::format("stage {}", st.stage));
  s += "\n";
  for (const std::string& k : kinds) {
    s += fmt::format("{:<26}", k);
    for (const StageMemoryPlan& st : plan.stages) {
      size_t b = 0;
      for (const MemoryPlanItem& i : st.items)
        if (i.kind == k) b = i.bytes;
      s += fmt::format("{:>14}", b ? human_bytes(double(b)) : "-");
    }
    s += "\n";
  }
  s += fmt::format("{:<26}", "device total");
  for (const StageMemoryPlan& st : plan.stages)
    s += fmt::format("{:>14}", human_bytes(double(st.total())));
  if (std::any_of(plan.stages.begin(), plan.stages.end(),
                  [](const StageMemoryPlan& st) { return st.host_total() > 0; })) {
    s += fmt::format("\n{:<26}", "host total");
    for (const StageMemoryPlan& st : plan.stages)
      s += fmt::format("{:>14}", human_bytes(double(st.host_total())));
  }
  s += fmt::format("\npeak per rank: {} ({} bytes)\n", human_bytes(double(plan.peak())),
                   plan.peak());
  if (cap > 0) {
    if (plan.peak() <= cap) {
      s += fmt::format("fits --max-device-memory {}\n", human_bytes(double(cap)));
    } else {
      s += fmt::format("does not fit --max-device-memory {}", human_bytes(double(cap)));
      const std::vector<std::string> fits = fitting_settings(opts, cap);
      s += fits.empty()
               ? ": no micro-batch count, recompute, ZeRO, 8-bit AdamW or offload "
                 "setting fits; more ranks (--tp, --pp, --dp with --zero) share the model\n"
               : "; these would:\n";
      for (const std::string& f : fits) s += f + "\n";
    }
  }
  return s;
}

size_t parse_byte_size(const std::string& text, const std::string& flag) {
  const auto bad = [&] {
    return UsageError(fmt::format(
        "{} {}: give a size such as 11GiB, 512MiB, 1.5GB or a number of bytes", flag, text));
  };
  const char* begin = text.c_str();
  char* end = nullptr;
  const double value = std::strtod(begin, &end);
  if (end == begin || !std::isfinite(value) || value < 0) throw bad();
  std::string unit(end);
  unit.erase(
      std::remove_if(unit.begin(), unit.end(), [](unsigned char c) { return std::isspace(c); }),
      unit.end());
  std::transform(unit.begin(), unit.end(), unit.begin(),
                 [](unsigned char c) { return char(std::tolower(c)); });
  const std::pair<const char*, double> units[] = {{"", 1},          {"b", 1},
                                                  {"kib", 1024.0},  {"mib", 1048576.0},
                                                  {"gib", 1 << 30}, {"tib", 1099511627776.0},
                                                  {"kb", 1e3},      {"mb", 1e6},
                                                  {"gb", 1e9},      {"tb", 1e12}};
  for (const auto& [name, scale] : units)
    if (unit == name) return size_t(std::llround(value * scale));
  throw bad();
}

}  // namespace mpitron
