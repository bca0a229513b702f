// The training loop: steps, evaluation when due, the per-rank figures of each step gathered
// on rank 0 in one message, the trace row and the progress line, stop signals agreed on at a step
// boundary, checkpoints when due.
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <limits>
#include <type_traits>

#include "base/check.hpp"
#include "base/gemm.hpp"
#include "base/human_units.hpp"
#include "comm/world.hpp"
#include "src/train/memory_plan.hpp"
#include "src/train/model_checkpoint.hpp"
#include "src/train/trainer_state.hpp"

namespace mpitron {

namespace {

// This process's peak resident set in bytes (Linux reports ru_maxrss in KiB).
double host_peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_maxrss) * 1024.0;
}

// Set by SIGUSR1/SIGTERM (Slurm's warning before a time limit or preemption), SIGHUP (the terminal
// or ssh session closed) and SIGINT (Ctrl-C, whose second press kills at once: the handler
// restores the default); a signal handler
// can only write a sig_atomic_t, so this one flag is process-wide by necessity.
volatile std::sig_atomic_t g_stop_signal = 0;
extern "C" void on_stop_signal(int sig) {
  g_stop_signal = sig;
  if (sig == SIGINT) {
    std::signal(SIGINT, SIG_DFL);
    static const char note[] =
        "\nstopping after this step with a checkpoint (Ctrl-C again to abort at once)\n";
    [[maybe_unused]] const ssize_t n = write(2, note, sizeof note - 1);  // async-signal-safe
  }
}

const char* stop_signal_name(int sig) {
  switch (sig) {
    case SIGINT:
      return "Ctrl-C (SIGINT)";
    case SIGTERM:
      return "SIGTERM";
    case SIGUSR1:
      return "SIGUSR1 (the time-limit warning)";
    case SIGHUP:
      return "SIGHUP (the terminal closed)";
  }
  return "a stop signal";
}

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// 1 - (time every rank computed) / (ranks x the slowest rank's walk through the schedule).
double measured_bubble(const std::vector<int64_t>& busy_us, double slowest_s) {
  if (busy_us.empty() || slowest_s <= 0) return 0;
  double busy = 0;
  for (int64_t b : busy_us) busy += double(b) * 1e-6;
  return std::max(0.0, 1.0 - busy / (double(busy_us.size()) * slowest_s));
}

// Every rank's RankMetrics onto rank 0 in one MPI_Gather (all: world entries on rank 0, none
// elsewhere), spread into the trace row's per-rank columns; returns the slowest rank's walk
// through the schedule (rank 0 only; 0 elsewhere).
double gather_rank_metrics(const RankMetrics& mine, std::vector<RankMetrics>& all,
                           io::TraceRow& row) {
  static_assert(std::is_trivially_copyable_v<RankMetrics>);
  MPI_CHECK(MPI_Gather(&mine, int(sizeof mine), MPI_BYTE, all.data(), int(sizeof mine), MPI_BYTE, 0,
                       MPI_COMM_WORLD));
  double slowest_s = 0;
  for (size_t r = 0; r < all.size(); ++r) {
    row.rank_busy_us[r] = all[r].busy_us;
    row.rank_grad_sync_us[r] = all[r].grad_sync_us;
    row.rank_activation_bytes[r] = all[r].activation_bytes;
    row.rank_comm_bytes[r] = all[r].comm_bytes;
    row.rank_peak_mem_bytes[r] = all[r].peak_mem_bytes;
    slowest_s = std::max(slowest_s, all[r].pipeline_s);
  }
  return slowest_s;
}

}  // namespace

// Of the whole network (a stage's registry holds its own part).
int64_t Trainer::total_parameters() const {
  return family.registry ? family.registry(cfg.model, RegistrySlice{}).parameter_count()
                         : model->registry.parameter_count();
}

// Blocks of each virtual stage, "3,3,2,4" (empty for a family that does not pipeline).
std::string Trainer::stage_layers_text() const {
  if (!family.pipeline_blocks) return "";
  std::string t;
  for (auto [b, e] : stage_blocks(family.pipeline_blocks(cfg.model), opts.layout)) {
    if (!t.empty()) t += ',';
    t += std::to_string(e - b);
  }
  return t;
}

io::Attributes Trainer::run_attributes() const {
  io::Attributes a = model_attributes(cfg.model);
  const Layout& L = opts.layout;
  a["config"] = cfg.name;
  a["data"] = opts.data;
  if (data.kind == DataKind::pairs)  // for epochs: steps x batch / training pairs
    a["data.train_pairs"] = data.pairs.train.pairs();
  a["device"] = std::string(device_name(opts.device));
  a["comm"] = std::string(comm_name(opts.comm));
  a["precision"] = std::string(precision_name(opts.precision));
  a["optimizer"] = std::string(optimizer_name(opts.optimizer));
  a["seed"] = int64_t(tc.seed);
  a["train.batch_size"] = int64_t(tc.batch_size);
  a["train.seq_len"] = int64_t(tc.seq_len);
  a["train.steps"] = int64_t(tc.steps);
  a["train.lr"] = tc.lr;
  a["train.min_lr_ratio"] = tc.min_lr_ratio;
  a["train.warmup_steps"] = int64_t(tc.warmup_steps);
  a["train.weight_decay"] = tc.weight_decay;
  a["train.grad_clip"] = tc.grad_clip;
  a["train.dropout"] = tc.dropout;
  a["train.micro_batches"] = int64_t(tc.micro_batches);
  a["train.augment"] = int64_t(tc.augment);
  a["train.fixed_batch"] = int64_t(tc.fixed_batch);
  a["train.objective"] = tc.objective;
  a["train.span_context_words"] = int64_t(tc.span_context_words);
  a["train.span_loss"] = tc.span_loss;
  a["train.span_drop_words"] = tc.span_drop_words;
  a["layout.world"] = int64_t(grid.shape.world);
  a["layout.dp"] = int64_t(L.dp);
  a["layout.tp"] = int64_t(L.tp);
  a["layout.pp"] = int64_t(L.pp);
  a["layout.zero"] = int64_t(L.zero);
  a["layout.dp_reduce"] = dp_reduce_name(L.dp_reduce);
  a["layout.bucket_mb"] = L.bucket_mb;
  a["layout.schedule"] = std::string(pipeline::schedule_name(L.schedule));
  a["layout.virtual_stages"] = int64_t(L.virtual_stages);
  a["layout.stage_layers"] = stage_layers_text();
  a["layout.recompute"] = std::string(L.recompute ? "block" : "none");
  a["gemm"] = std::string(opts.device != Device::cuda ? cpu::gemm_library() : "cublas");
  if (!opts.init_from.empty()) a["init_from"] = opts.init_from;
  a["parameters"] = total_parameters();
  return a;
}

int Trainer::run() {
  for (auto [group, name] : {std::pair{&grid.world, "world"},
                             {&grid.dp, "dp"},
                             {&grid.tp, "tp"},
                             {&grid.pp, "pp"},
                             {&grid.embedding, "embedding"}})
    group->set_call_log(&progress.calls, name);
  const Watchdog watchdog(progress, opts.hang_timeout_s, grid.rank);
  progress.mark("choosing and loading the checkpoint (world)");
  const std::string resume_from = resume_or_init();
  std::string trace_error;
  if (is_root()) {
    try {
      const std::string trace_path = (std::filesystem::path(opts.out) / "trace.h5").string();
      // A fresh start must not overwrite the steps of a run that stopped before its first
      // checkpoint: they cannot be continued, and nothing may silently lose a trace.
      if (resume_from.empty() && std::filesystem::exists(trace_path)) {
        const io::Trace old = io::read_trace(trace_path);
        if (!old.step.empty())
          throw UsageError(fmt::format(
              "{} holds the trace of steps {}-{}, but {} holds no checkpoint to continue them "
              "from (the run stopped before its first one): starting again would replace that "
              "trace. Keep it: move it away (mv {} {}/trace-steps-{}-{}.h5) and run again, or "
              "choose another --out",
              trace_path, old.step.front(), old.step.back(), opts.out, trace_path, opts.out,
              old.step.front(), old.step.back()));
      }
      trace = std::make_unique<io::TraceWriter>(
          (std::filesystem::path(opts.out) / "trace.h5").string(), run_attributes(),
          resume_from.empty() ? -1 : step, opts.trace_flush_every);
    } catch (const UsageError& e) {
      trace_error = e.what();
    }
  }
  comm::throw_on_all_ranks(trace_error, 0, MPI_COMM_WORLD);
  if (is_root()) {
    spdlog::info(
        "{} ({}): {} parameters, layout dp={}{} tp={} pp={} zero={}{}, global batch {} "
        "({} micro-batches of {} per rank), {} steps, {}{}, gemm {}{}, {}",
        cfg.name, cfg.model.type, total_parameters(), opts.layout.dp,
        opts.dp_inferred ? " (ranks / tp·pp)" : "", opts.layout.tp, opts.layout.pp,
        opts.layout.zero,
        opts.layout.pp > 1
            ? fmt::format(", schedule {} (blocks per stage {}, {} activation sets on stage 0)",
                          pipeline::schedule_name(opts.layout.schedule), stage_layers_text(),
                          model_slots)
            : "",
        is_sequence_data(data.kind) ? fmt::format("{}x{}", tc.batch_size, tc.seq_len)
                                    : fmt::format("{}", tc.batch_size),
        tc.micro_batches, micro_rows, tc.steps, device_name(opts.device),
        opts.precision == DType::f32
            ? ""
            : fmt::format(" {}{}", precision_name(opts.precision),
                          loss_scale.enabled()
                              ? fmt::format(" (loss scale from 2^{})", std::ilogb(loss_scale.scale))
                              : ""),
        // cpu-staged keeps a device's memory and copies but runs the CPU's products.
        opts.device != Device::cuda ? cpu::gemm_library() : "cublas",
        opts.device != Device::cuda ? fmt::format(" on {} thread{} per rank ({})", opts.threads,
                                                  opts.threads == 1 ? "" : "s", opts.threads_why)
                                    : "",
        data.describe());
    if (tc.bitwise) {
      const int tp_shards = bitwise_tp_shards(opts);
      spdlog::info(
          "bitwise: {} reduction shards of {} sample{} (one micro-batch each){}, summed in one "
          "fixed "
          "tree: every layout of these settings trains these bits",
          tc.reduction_shards, micro_rows, micro_rows == 1 ? "" : "s",
          tp_shards > 0 ? fmt::format(", {} TP shards", tp_shards) : std::string(", tp 1"));
    }
    if (opts.optimizer == Optimizer::adamw8bit)
      spdlog::info("optimizer adamw8bit: moments as 8-bit codes, {} of state on rank 0",
                   human_bytes(double(adamw8bit_state_bytes(shard.size()))));
    // The interval in effect (after a resume with --allow-changes, the new one).
    spdlog::info("checkpoints in {}: {}{}", opts.out,
                 tc.ckpt_every > 0 ? fmt::format("every {} steps and at the end", tc.ckpt_every)
                                   : std::string("at the end"),
                 opts.keep_last > 0 ? fmt::format(", the newest {} kept", opts.keep_last) : "");
  }
  std::signal(SIGUSR1, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
  std::signal(SIGHUP, on_stop_signal);
  std::signal(SIGINT, on_stop_signal);
  // A file grown past the process's size limit (ulimit -f) fails its write (EFBIG), which the
  // checkpoint writer reports, instead of killing the rank mid-write.
  std::signal(SIGXFSZ, SIG_IGN);

  const int64_t first = step + 1;
  const double majority = data.majority_share();  // the accuracy's floor, for the log
  const auto t_start = Clock::now();
  auto t_after_first = t_start;
  // Tokens (or samples) a step reads, rows as long as the step's (length buckets: its longest
  // pair's); a masked LM predicts only some of its tokens.
  double tokens_read = 0;
  comm_bytes_before = comm_bytes_total();
  double last_loss = std::numeric_limits<double>::quiet_NaN(), best_val = last_loss;
  int64_t best_val_step = 0;
  for (int64_t s = first; s <= tc.steps; ++s) {
    const auto t0 = Clock::now();
    const StepResult r = train_step(s);
    const double dt = seconds_since(t0);
    const double step_tokens = is_sequence_data(data.kind)
                                   ? double(tc.batch_size) * data.filled_seq_len
                                   : double(tc.batch_size);
    tokens_read += step_tokens;
    step = s;
    const double nan = std::numeric_limits<double>::quiet_NaN();
    EvalResult eval{nan, nan};
    if ((tc.eval_every > 0 && s % tc.eval_every == 0) || s == tc.steps) eval = evaluate();
    const double val = eval.loss;
    const double bleu =
        tc.bleu_every > 0 && (s % tc.bleu_every == 0 || s == tc.steps) ? evaluate_bleu() : nan;
    const uint64_t bytes_now = comm_bytes_total();
    const int64_t comm_bytes = int64_t(bytes_now - comm_bytes_before);
    comm_bytes_before = bytes_now;
    progress.mark("gathering the per-rank figures (world)");
    progress.calls.note("MPI_Gather", "world");
    RankMetrics mine;
    mine.busy_us = int64_t(r.busy_s * 1e6);
    mine.grad_sync_us = int64_t(sync->take_comm_seconds() * 1e6);
    mine.activation_bytes = int64_t(model_activation_bytes + executor->send_buffer_bytes());
    mine.comm_bytes = comm_bytes;
    mine.peak_mem_bytes = int64_t(dev.alloc.peak_bytes);
    mine.pipeline_s = r.pipeline_s;
    const double slowest_s = gather_rank_metrics(mine, rank_metrics, row);
    const int64_t peak = mine.peak_mem_bytes;
    if (!std::isfinite(r.loss)) {
      if (is_root()) trace->flush();
      throw UsageError(
          fmt::format("loss is {} at step {}: training diverged (lower --lr?)", r.loss, s));
    }
    last_loss = r.loss;
    if (!std::isnan(val) && !(val >= best_val)) {
      best_val = val;
      best_val_step = s;
    }
    if (is_root()) {
      row.step = s;
      row.loss = r.loss;
      row.val_loss = val;
      row.val_accuracy = eval.accuracy;
      row.val_bleu = bleu;
      row.lr = r.lr;
      row.grad_norm = r.grad_norm;
      row.tokens_per_s = step_tokens / dt;
      row.step_s = dt;
      row.comm_bytes = comm_bytes;
      row.peak_mem_bytes = peak;
      row.bubble = measured_bubble(row.rank_busy_us, slowest_s);
      row.loss_scale = r.loss_scale;
      row.skipped = r.skipped ? 1 : 0;
      if (r.skipped)
        spdlog::info(
            "step {}: gradients overflowed at loss scale 2^{}: step skipped, scale now 2^{}", s,
            std::ilogb(r.loss_scale), std::ilogb(loss_scale.scale));
      trace->append(row);
      if ((tc.log_every > 0 && s % tc.log_every == 0) || s == first || s == tc.steps ||
          !std::isnan(val) || !std::isnan(bleu)) {
        // The first step (first touches of memory, caches) is no guide: the ETA counts from the
        // end of it, and the first line gives none.
        if (s == first) t_after_first = Clock::now();
        const std::string eta = s == first
                                    ? "after step " + std::to_string(first + 1)
                                    : human_seconds(seconds_since(t_after_first) /
                                                    double(s - first) * double(tc.steps - s));
        spdlog::info(
            "step {:>6}/{} | loss {:.4f}{}{} | lr {:.2e} | norm {:.3f}{} | {:.1f}k {}/s | "
            "{:.1f} ms{} | params {} | peak {} | ETA {}",
            s, tc.steps, r.loss,
            (std::isnan(val) ? std::string() : fmt::format(" | val {:.4f}", val)) +
                (std::isnan(bleu) ? std::string() : fmt::format(" | bleu {:.2f}", bleu)),
            std::isnan(eval.accuracy)
                ? ""
                : fmt::format(" | acc {:.2f}% of {} (majority class {:.1f}%)", 100 * eval.accuracy,
                              int64_t(tc.eval_batches) * tc.batch_size, 100 * majority),
            r.lr, r.grad_norm,
            std::isnan(r.loss_scale) ? "" : fmt::format(" | scale 2^{}", std::ilogb(r.loss_scale)),
            step_tokens / dt / 1000, is_sequence_data(data.kind) ? "tok" : "samples", dt * 1000,
            opts.layout.pp > 1 ? fmt::format(" | bubble {:.2f}", row.bubble) : "",
            human_bytes(double(row.param_bytes)), human_bytes(double(peak)), eta);
      }
    }
    const bool ckpt_due = tc.ckpt_every > 0 && s % tc.ckpt_every == 0;
    progress.mark("the stop-signal agreement (world)");
    // Every rank must agree to stop at the same step boundary.
    int stop_local = g_stop_signal, stop = 0;
    progress.calls.note("MPI_Allreduce", "world");
    MPI_CHECK(MPI_Allreduce(&stop_local, &stop, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    if (ckpt_due || s == tc.steps || stop) {
      if (is_root()) trace->flush();
      save_checkpoint();
    }
    if (stop && s < tc.steps) {
      if (is_root()) {
        trace->flush();
        spdlog::warn(
            "{} received: stopped after step {} with a checkpoint; continue "
            "with --resume auto",
            stop_signal_name(stop), s);
      }
      return kExitStoppedBySignal;
    }
  }
  if (first > tc.steps) {
    if (step == 0) {
      save_checkpoint();  // --steps 0: the initial parameters
    } else if (is_root()) {
      spdlog::info("checkpoint is at step {}: nothing to do for --steps {}", step, tc.steps);
    }
  }
  // The largest rank's peak resident set: the host's side of the run (data, offloaded state and
  // master weights, staging, the process itself), beside the plan's host rows.
  struct {
    double bytes;
    int rank;
  } rss{host_peak_rss_bytes(), grid.rank}, largest{0, 0};
  if (first <= tc.steps)
    MPI_CHECK(MPI_Reduce(&rss, &largest, 1, MPI_DOUBLE_INT, MPI_MAXLOC, 0, MPI_COMM_WORLD));
  if (is_root()) {
    trace->flush();
    if (first <= tc.steps) {
      const double took = seconds_since(t_start);
      const double read = tokens_read;
      spdlog::info(
          "done: steps {}-{} in {} ({} {} at {}/s), last loss {:.4f}{}, checkpoint {}", first,
          tc.steps, human_seconds(took), human_count(read),
          is_sequence_data(data.kind) ? "tokens" : "samples", human_count(read / took), last_loss,
          std::isnan(best_val)
              ? ""
              : fmt::format(", best validation loss {:.4f} at step {}", best_val, best_val_step),
          checkpoint_path(tc.steps));
      spdlog::info("{}", planned_bytes >= 0 ? plan_accuracy_line(row)
                                            : "memory plan: none: " + missing_memory_plan(opts));
      spdlog::info("host memory: peak resident set {} (rank {}, the largest){}",
                   human_bytes(largest.bytes), largest.rank,
                   planned_host_bytes > 0 ? fmt::format("; rank 0's plan has {} in host rows",
                                                        human_bytes(double(planned_host_bytes)))
                                          : "");
    }
  }
  return 0;
}

std::string plan_accuracy_line(const io::TraceRow& row) {
  size_t worst = 0;
  double worst_gap = -1;
  for (size_t r = 0; r < row.rank_peak_mem_bytes.size(); ++r) {
    const double measured = double(row.rank_peak_mem_bytes[r]);
    const double gap = std::abs(double(row.rank_planned_mem_bytes[r]) - measured) / measured;
    if (gap > worst_gap) worst_gap = gap, worst = r;
  }
  return fmt::format(
      "memory plan: every rank's measured peak within {:.2f}% of the plan (largest gap: rank {}, "
      "measured {} B, planned {} B)",
      100 * worst_gap, worst, row.rank_peak_mem_bytes[worst], row.rank_planned_mem_bytes[worst]);
}

}  // namespace mpitron
