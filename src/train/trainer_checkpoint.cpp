// Checkpoints and resume: which checkpoint a run continues (--resume, --init-from), what each
// rank writes and reads of it (its TP shard of the parameters, its ZeRO shard of the moments),
// and the checks that a resumed run is the same run (model, settings, data, tokenizer).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <array>
#include <filesystem>
#include <variant>

#include "base/check.hpp"
#include "comm/mpi_check.hpp"
#include "comm/world.hpp"
#include "io/checkpoint.hpp"
#include "src/train/adamw.hpp"
#include "src/train/model_checkpoint.hpp"
#include "src/train/pretrained.hpp"
#include "src/train/trainer_state.hpp"

namespace mpitron {

AdamW8bitShard Trainer::adamw8bit_shard() {
  AdamW8bitState& s = adamw8bit_files.m_codes.size() > 0 ? adamw8bit_files : adamw8bit;
  return {shard, s.m_codes.data(), s.v_codes.data(), s.m_absmax.data(), s.v_absmax.data()};
}

namespace {

// The 8-bit state's four arrays as byte ranges: on the device, in its host copies.
struct StateArray {
  void* device;
  void* host;
  size_t bytes;
};
std::array<StateArray, 4> state_arrays(Trainer::AdamW8bitState& d, Trainer::AdamW8bitState& h) {
  return {{{d.m_codes.data(), h.m_codes.data(), h.m_codes.size()},
           {d.v_codes.data(), h.v_codes.data(), h.v_codes.size()},
           {d.m_absmax.data(), h.m_absmax.data(), h.m_absmax.size() * sizeof(float)},
           {d.v_absmax.data(), h.v_absmax.data(), h.v_absmax.size() * sizeof(float)}}};
}

}  // namespace

void Trainer::download_state() {
  dev.download_state(*model, m, v);
  if (adamw8bit_files.m_codes.size() == 0) return;
  for (const StateArray& a : state_arrays(adamw8bit, adamw8bit_files))
    dev.layers.download_bytes(a.host, a.device, a.bytes);
}

void Trainer::upload_state() {
  dev.upload_state(*model, m, v);
  if (adamw8bit_files.m_codes.size() == 0) return;
  for (const StateArray& a : state_arrays(adamw8bit, adamw8bit_files))
    dev.layers.upload_bytes(a.device, a.host, a.bytes);
}

// Parameters are written by DP rank 0 (they are replicated over DP), moments by their owner;
// tensors replicated over TP by TP rank 0 only. For reading, every rank reads its TP shard of
// the parameters and the moments of its own ZeRO shard. 8-bit AdamW state is flat per (stage,
// TP rank): every rank names every one in a write, and reads its own.
std::vector<io::TensorPiece> Trainer::checkpoint_pieces(bool for_writing) {
  const bool param_writer = !for_writing || grid.coords.dp_rank == 0;
  const bool moment_writer = !for_writing || opts.layout.zero > 0 || grid.coords.dp_rank == 0;
  const bool fp32_moments = opts.optimizer == Optimizer::adamw;
  std::vector<io::TensorPiece> pieces =
      parameter_pieces(model->registry, dev.params_for_files(*model), dev.buffers_for_files(*model),
                       param_writer, for_writing);
  if (fp32_moments)
    for (auto& t : moment_pieces(model->registry, shard, dev.m_for_files(m), dev.v_for_files(v),
                                 moment_writer, for_writing))
      pieces.push_back(std::move(t));
  // Every stage names every tensor of the whole network in the collective write.
  if (for_writing && opts.layout.pp > 1)
    pieces = pieces_for_every_stage(
        std::move(pieces),
        family.registry(cfg.model, RegistrySlice{opts.layout.tp, grid.coords.tp_rank}),
        fp32_moments);
  if (opts.optimizer == Optimizer::adamw8bit) {
    const Layout& L = opts.layout;
    const AdamW8bitShard mine = adamw8bit_shard();
    const int64_t B = int64_t(kAdamW8bitBlock);
    int64_t elements = (int64_t(model->registry.size()) + B - 1) / B * B;
    if (!for_writing) {
      for (auto& t : adamw8bit_pieces(adamw8bit_group(grid.coords.pp_rank, grid.coords.tp_rank),
                                      size_t(elements), &mine))
        pieces.push_back(std::move(t));
      return pieces;
    }
    // The stored length of every (stage, TP rank): world rank (pp_rank·dp + dp_rank)·tp + tp_rank.
    std::vector<int64_t> lengths(size_t(grid.shape.world));
    MPI_CHECK(
        MPI_Allgather(&elements, 1, MPI_INT64_T, lengths.data(), 1, MPI_INT64_T, MPI_COMM_WORLD));
    for (int s = 0; s < L.pp; ++s)
      for (int t = 0; t < L.tp; ++t) {
        const bool own = s == grid.coords.pp_rank && t == grid.coords.tp_rank && moment_writer;
        for (auto& p :
             adamw8bit_pieces(adamw8bit_group(s, t), size_t(lengths[size_t(s * L.dp * L.tp + t)]),
                              own ? &mine : nullptr))
          pieces.push_back(std::move(p));
      }
  }
  return pieces;
}

std::string Trainer::adamw8bit_flat_sizes() {
  const int64_t mine = int64_t(model->registry.size());
  std::vector<int64_t> all(size_t(grid.shape.world));
  MPI_CHECK(MPI_Allgather(&mine, 1, MPI_INT64_T, all.data(), 1, MPI_INT64_T, MPI_COMM_WORLD));
  const Layout& L = opts.layout;
  std::string text;
  for (int s = 0; s < L.pp; ++s)
    for (int t = 0; t < L.tp; ++t)  // world rank (pp_rank·dp + dp_rank)·tp + tp_rank, dp_rank 0
      text += fmt::format("{}pp{}_tp{} {}", text.empty() ? "" : ", ", s, t,
                          all[size_t(s * L.dp * L.tp + t)]);
  return text;
}

std::string Trainer::checkpoint_path(int64_t s) const {
  return (std::filesystem::path(opts.out) / fmt::format("ckpt_{}.h5", s)).string();
}

void Trainer::save_checkpoint() {
  progress.mark("writing a checkpoint (world)");
  CheckpointRecord r;
  r.model = cfg.model;
  r.step = step;
  r.tokens_seen = step * loss_terms;
  r.seed = int64_t(tc.seed);
  r.dp = opts.layout.dp;
  r.tp = opts.layout.tp;
  r.pp = opts.layout.pp;
  r.zero = opts.layout.zero;
  r.lr = tc.lr;
  r.steps = tc.steps;
  r.batch_size = tc.batch_size;
  r.seq_len = tc.seq_len;
  r.data = data.attributes();
  r.settings = run_settings(cfg);
  r.eval_batches = tc.eval_batches;  // for `mpitron eval`'s defaults
  r.loss_scale = loss_scale.scale;
  r.loss_scale_clean_steps = loss_scale.clean_steps;
  r.optimizer = optimizer_name(opts.optimizer);
  if (opts.optimizer == Optimizer::adamw8bit) {
    r.adamw8bit_stage_blocks = stage_layers_text();
    r.adamw8bit_flat_sizes = adamw8bit_flat_sizes();
  }
  const std::string path = checkpoint_path(step);
  download_state();
  // A beat per tensor: a long write is progress, a write stuck on a lost peer is not.
  io::write_checkpoint(path, checkpoint_root_attributes(r), checkpoint_groups(r),
                       checkpoint_pieces(true), MPI_COMM_WORLD,
                       [this] { progress.mark("writing a checkpoint (world)"); });
  if (is_root()) spdlog::info("checkpoint {}", path);
  if (is_root() && opts.keep_last > 0)
    for (const std::string& old : io::remove_old_checkpoints(opts.out, opts.keep_last))
      spdlog::info("removed {} (--keep-last {})", old, opts.keep_last);
}

void Trainer::load_checkpoint(const std::string& path) {
  const CheckpointRecord r = read_checkpoint_record(path);
  check_same_model(r, cfg.model, path);
  // Neither optimizer's state converts into the other's, and 8-bit blocks are positions of each
  // (stage, TP rank)'s flat allocation: no --allow-changes for these.
  const std::string optimizer = optimizer_name(opts.optimizer);
  if (r.optimizer != optimizer)
    throw UsageError(fmt::format(
        "{} was trained with --optimizer {}, this run asks for --optimizer {}: its optimizer "
        "state does not convert; resume with --optimizer {}, or start afresh from its parameters "
        "with --init-from",
        path, r.optimizer, optimizer, r.optimizer));
  if (opts.optimizer == Optimizer::adamw8bit && (r.tp != opts.layout.tp || r.pp != opts.layout.pp))
    throw UsageError(fmt::format(
        "{} holds 8-bit AdamW state written at --tp {} --pp {}, whose blocks are that layout's "
        "flat positions: resume it at --tp {} --pp {} (any --dp and --zero), or start afresh from "
        "its parameters with --init-from",
        path, r.tp, r.pp, r.tp, r.pp));
  if (opts.optimizer == Optimizer::adamw8bit && r.adamw8bit_stage_blocks != stage_layers_text())
    throw UsageError(fmt::format(
        "{} holds 8-bit AdamW state of stages of {} blocks, this run's stages hold {}: resume it "
        "with the same --stage-layers, --schedule and --virtual-stages",
        path, r.adamw8bit_stage_blocks, stage_layers_text()));
  if (opts.optimizer == Optimizer::adamw8bit && !r.adamw8bit_flat_sizes.empty()) {
    const std::string mine = adamw8bit_flat_sizes();
    if (r.adamw8bit_flat_sizes != mine)
      throw UsageError(fmt::format(
          "{} holds 8-bit AdamW state of flat parameter arrays of {} elements, this run's hold {}: "
          "8-bit blocks are positions in them, and another device's padding moves them (CUDA pads "
          "the GPT's vocabulary rows to a multiple of 128); resume it with the --device it was "
          "written with, or start afresh from its parameters with --init-from",
          path, r.adamw8bit_flat_sizes, mine));
  }
  const std::vector<std::string> changes = setting_changes(r.settings, run_settings(cfg));
  if (!changes.empty()) {
    const std::string list = fmt::format("{}", fmt::join(changes, ", "));
    if (!opts.allow_changes)
      throw UsageError(fmt::format(
          "resuming {} would change the run's settings ({}): use the checkpoint's, or pass "
          "--allow-changes to continue with the new ones (the trace records each segment's)",
          path, list));
    if (is_root()) spdlog::warn("continuing {} with changed settings: {}", path, list);
    // A changed schedule (lr, warm-up, steps, floor) moves the learning rate at once: say so.
    auto old = [&](const char* key, double now) {
      auto it = r.settings.find(key);
      if (it == r.settings.end()) return now;
      if (const double* d = std::get_if<double>(&it->second)) return *d;
      if (const int64_t* i = std::get_if<int64_t>(&it->second)) return double(*i);
      return now;
    };
    const int64_t next = r.step + 1;
    const double was = learning_rate(
        next, old("train.lr", tc.lr), int(old("train.warmup_steps", tc.warmup_steps)),
        int64_t(old("train.steps", double(tc.steps))), old("train.min_lr_ratio", tc.min_lr_ratio));
    const double now = learning_rate(next, tc.lr, tc.warmup_steps, tc.steps, tc.min_lr_ratio);
    if (is_root() && was != now)
      spdlog::warn(
          "the learning rate at step {} is {:.3e} under the new schedule, {:.3e} under "
          "the checkpoint's",
          next, now, was);
  }
  // Stages read different tensors, so a missing one may stop only some ranks: every rank stops
  // with the message of the first rank that failed, instead of the others waiting for it.
  std::string error;
  download_state();  // what the file does not hold stays as it is
  try {
    io::read_checkpoint_tensors(path, checkpoint_pieces(false));
  } catch (const UsageError& e) {
    error = e.what();
  }
  comm::throw_first_error(error, MPI_COMM_WORLD);
  upload_state();
  model->parameters_changed();
  step = r.step;
  if (loss_scale.enabled() && r.loss_scale > 0) {  // the scaler continues where it stopped
    loss_scale.scale = r.loss_scale;
    loss_scale.clean_steps = r.loss_scale_clean_steps;
  }
  auto c = r.data.find("checksum");
  if (c != r.data.end() && std::holds_alternative<int64_t>(c->second) &&
      std::get<int64_t>(c->second) != int64_t(data.checksum()) && is_root())
    spdlog::warn("data differs from the data the checkpoint was trained on");
  // Pairs encoded with another SentencePiece model (or bytes) would be other tokens.
  if (data.kind == DataKind::pairs) {
    auto c = r.data.find("tokenizer_checksum");
    const int64_t was = c != r.data.end() && std::holds_alternative<int64_t>(c->second)
                            ? std::get<int64_t>(c->second)
                            : 0;
    if (was != int64_t(data.pairs.tokenizer_checksum)) {
      auto t = r.data.find("tokenizer");
      const std::string* name = t != r.data.end() ? std::get_if<std::string>(&t->second) : nullptr;
      throw UsageError(fmt::format(
          "{} was trained on pairs encoded {}; this run encodes them {}: resume with {}", path,
          was == 0 ? "as bytes" : "with the SentencePiece model " + (name ? *name : "?"),
          data.pairs.tokenizer.empty() ? "as bytes" : "with another model, " + data.pairs.tokenizer,
          was == 0 ? "no --tokenizer" : "--tokenizer " + (name ? *name : "(that model)")));
    }
  }
  // Verses encoded otherwise than the checkpoint's (bytes vs WordPiece) would be other tokens.
  auto t = r.data.find("tokenizer");
  if (data.kind == DataKind::verses && t != r.data.end() &&
      std::holds_alternative<std::string>(t->second) &&
      std::get<std::string>(t->second) != data.verses.tokenizer) {
    const std::string& was = std::get<std::string>(t->second);
    throw UsageError(
        fmt::format("{} was trained on verses encoded {}; this run encodes them {}: resume with {}",
                    path, was.empty() ? "as bytes" : "with the WordPiece vocabulary " + was,
                    data.verses.tokenizer.empty() ? "as bytes" : "with " + data.verses.tokenizer,
                    was.empty() ? "no --tokenizer" : "--tokenizer " + was));
  }
}

// --init-from: every rank reads its own parameter pieces; the first failure stops every rank.
void Trainer::init_from(const std::string& source) {
  std::string error;
  std::vector<std::string> fresh;
  download_state();  // the fresh head keeps its initialisation
  try {
    fresh =
        load_pretrained_parameters(source, cfg.model,
                                   parameter_pieces(model->registry, dev.params_for_files(*model),
                                                    dev.buffers_for_files(*model), true));
  } catch (const UsageError& e) {
    error = e.what();
  }
  comm::throw_first_error(error, MPI_COMM_WORLD);
  upload_state();
  model->parameters_changed();
  if (is_root()) spdlog::info("parameters from {} (step 0, fresh optimizer)", source);
  if (is_root() && !fresh.empty())
    spdlog::info("initialised, not in {} (this run's task head): {}", source,
                 fmt::join(fresh, ", "));
}

namespace {

// The newest checkpoint in dir whose file opens and whose record reads. A newer one that does not
// (a node lost while its write reached the disk) is set aside as <name>.damaged, with a warning:
// left in place, its larger step would outrank later checkpoints (--keep-last would delete them).
std::string newest_readable_checkpoint(const std::string& dir) {
  const auto found = io::list_checkpoints(dir);
  for (auto it = found.rbegin(); it != found.rend(); ++it) {
    try {
      read_checkpoint_record(it->second);
      return it->second;
    } catch (const std::exception& e) {
      const std::string aside = it->second + ".damaged";
      std::error_code ec;
      std::filesystem::rename(it->second, aside, ec);
      spdlog::warn("skipping {}: {}; {} (resuming from the newest complete checkpoint before it)",
                   it->second, e.what(),
                   ec ? "left in place: " + ec.message() : "moved to " + aside);
    }
  }
  return "";
}

}  // namespace

// Rank 0 looks at the run folder and decides; every rank gets its verdict (file systems may
// show ranks different views, and a refusal must reach every rank).
std::string Trainer::choose_checkpoint() {
  std::string chosen, error;
  if (is_root()) {
    try {
      for (const std::string& stale : io::remove_stale_checkpoint_writes(opts.out))
        spdlog::info("removed {}: the remains of an interrupted checkpoint write", stale);
      const std::string latest = io::latest_checkpoint(opts.out);
      if (opts.resume == "auto") {
        chosen = newest_readable_checkpoint(opts.out);
        if (chosen.empty()) spdlog::info("no checkpoint in {}: starting from scratch", opts.out);
      } else if (!opts.resume.empty()) {
        chosen = opts.resume;
      } else if (!latest.empty()) {
        error = fmt::format(
            "run folder {} already holds checkpoints ({}): continue it with --resume auto, or "
            "choose another --out",
            opts.out, latest);
      }
    } catch (const std::exception& e) {
      error = fmt::format("cannot use run folder {}: {}", opts.out, e.what());
    }
  }
  comm::throw_on_all_ranks(error, 0, MPI_COMM_WORLD);
  return comm::broadcast_string(chosen, 0, MPI_COMM_WORLD);
}

// The checkpoint --resume names or finds, loaded; else --init-from's parameters.
std::string Trainer::resume_or_init() {
  if (!opts.init_from.empty() && !opts.resume.empty() && opts.resume != "auto")
    throw UsageError(
        "--init-from and --resume CKPT exclude each other (with --resume auto, a "
        "checkpoint in --out wins over --init-from)");
  const std::string resume_from = choose_checkpoint();
  if (!resume_from.empty()) {
    load_checkpoint(resume_from);
    if (is_root()) spdlog::info("resumed from {} at step {}", resume_from, step);
  } else if (!opts.init_from.empty()) {
    init_from(opts.init_from);
  }
  return resume_from;
}

}  // namespace mpitron
