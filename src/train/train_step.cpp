// One training step and one evaluation: this stage's walk through the pipeline schedule
// (forward and backward of each micro-batch), the gradient reduction, the norm, clipping and
// AdamW, and the loss summed over stages and data-parallel ranks.
#include <algorithm>
#include <limits>

#include "comm/mpi_check.hpp"
#include "comm/world.hpp"
#include "src/task/translation.hpp"
#include "src/train/adamw.hpp"
#include "src/train/reduction_tree.hpp"
#include "src/train/trainer_state.hpp"

namespace mpitron {

MicroBatch Trainer::micro_batch(int64_t s, int64_t global_row, int rows, float dropout) const {
  MicroBatch mb;
  mb.samples = data.view(global_row - first_row, rows);
  mb.first_sample = global_row;
  mb.step = s;
  mb.data_step = walk.data_step;
  mb.dropout = dropout;
  mb.seed = tc.seed;
  return mb;
}

// train.loss_scale, or 2^16 for fp16 when it is 0: fp16 gradients underflow without a scale.
double Trainer::initial_loss_scale() const {
  if (tc.loss_scale == 0 && opts.precision == DType::f16) return 0x1p16;
  return tc.loss_scale;
}

// Rows of micro-batch mb of this rank's part of the global batch.
RowRange Trainer::micro_batch_rows(int mb) const {
  return batch_slice(tc.batch_size, opts.layout.dp, grid.coords.dp_rank, tc.micro_batches, mb);
}

// The pipeline's view of the model, built once (its callbacks read `walk`).
pipeline::StageWork Trainer::stage_work() {
  pipeline::StageWork w;
  w.forward = [this](int mb, int chunk, int slot) {
    progress.mark("a forward, or waiting for a neighbour stage's message (pp)");
    const MicroBatch b = micro_batch_of(mb, chunk, slot);
    const double loss = model->forward(b);
    if (!shard_losses.empty() && chunk == opts.layout.virtual_stages - 1)
      shard_losses[size_t(mb)] = loss;
    if (walk.correct && last_stage() && chunk == opts.layout.virtual_stages - 1)
      *walk.correct += model->count_correct(b);
    dev.ops.synchronize();  // the busy time (the executor's clock) is the device's
    return loss;
  };
  w.backward = [this](int mb, int chunk, int slot) {
    progress.mark("a backward, or waiting for a neighbour stage's message (pp)");
    model->backward(micro_batch_of(mb, chunk, slot), walk.dloss,
                    sync->hook(mb == tc.micro_batches - 1));
    if (tc.bitwise) sync->end_shard(grid.coords.dp_rank * tc.micro_batches + mb);
    dev.ops.synchronize();
  };
  w.boundary = [this](int chunk, int slot) { return model->boundary(chunk, slot); };
  w.rows = [this](int mb) { return int(micro_batch_rows(mb).count); };
  return w;
}

MicroBatch Trainer::micro_batch_of(int mb, int chunk, int slot) const {
  const RowRange rows = micro_batch_rows(mb);
  MicroBatch b = micro_batch(walk.step, rows.begin, int(rows.count), walk.dropout);
  b.slot = slot;
  b.chunk = chunk;
  b.training = walk.training;
  b.dloss = walk.dloss;
  return b;
}

StepResult Trainer::train_step(int64_t s) {
  progress.step.store(s);
  progress.mark("reading the batch");
  const int64_t batch = tc.fixed_batch ? 1 : s;  // which global batch of the training data
  data.fill(io::Split::train, tc.seed, batch, first_row, local_rows,
            data.batch_seq_len(io::Split::train, tc.seed, batch, tc.batch_size));
  sync->begin_step();
  progress.mark("forward and backward (pipeline messages over pp, TP all-reduces over tp)");
  // The global batch's loss terms: fixed, or (translation pairs) their target tokens this step.
  const int64_t terms = data.loss_terms(io::Split::train, tc.seed, batch, tc.batch_size,
                                        model->loss_terms_per_sample());
  const float dloss = loss_scale.dloss(terms);
  walk = {s, batch, float(tc.dropout), dloss, nullptr, true};
  const double loss_sum = executor->run(train_actions, train_sends, work, true);
  progress.mark("the batch-norm statistics' all-reduce (dp)");
  model->end_step(grid.dp);
  progress.mark("the gradient reduction (embedding group, then dp)");
  sync->finish_backward();
  progress.mark("the gradient norm's all-reduce (dp, tp, pp)");
  // Global gradient norm: every rank holds the summed gradient of its shard.
  const double used_scale = loss_scale.scale;
  const double norm = loss_scale.unscaled(sync->grad_norm());
  const double lr = learning_rate(s, tc.lr, tc.warmup_steps, tc.steps, tc.min_lr_ratio);
  progress.mark("the loss all-reduce (pp, dp)");
  const double loss =
      (tc.bitwise ? loss_in_fixed_order() : sum_over_stages_and_dp(loss_sum)) / double(terms);
  // The norm is the same on every rank, so every rank skips (or not) alike.
  const bool skipped = !loss_scale.step_ok(norm);
  if (!skipped) {
    const float clip =
        tc.grad_clip > 0 && norm > tc.grad_clip ? float(tc.grad_clip / (norm + 1e-6)) : 1.0f;
    // Unscaling and clipping in one factor; a power of two keeps the product exact.
    const float grad_scale = used_scale > 0 ? clip * float(1.0 / used_scale) : clip;
    const AdamWConfig acfg{tc.beta1, tc.beta2, tc.eps, tc.weight_decay};
    // Where the update runs and what it reads: the device's own buffers, or (--offload optimizer)
    // the host's cores on the state in host memory. Off the host that update walks the shard a
    // staging chunk at a time: the chunk's gradients (and parameters, unless the master weights
    // live in host memory) down, the update, the parameters back up. Element-wise, so the bits
    // do not depend on the chunks (whole 8-bit blocks). Chunk k stages in half k % 2 of the
    // staging buffers: chunk k + 1 comes down while the host updates chunk k, and the copy stream
    // runs in order, so chunk k - 1's upload from that half precedes chunk k + 1's download.
    const bool staged = opts.offload_optimizer && !dev.on_host;
    const bool staged_params = staged && !opts.offload_master;
    const StepBackend& update = opts.offload_optimizer ? step_backend(Device::cpu) : dev.ops;
    float* const params = model->params.data();
    const float* const grads = sync->owned_grads();
    const size_t chunk = staged ? offload_grads.size() / 2 : shard.size();
    uint64_t downloaded[2] = {0, 0};
    auto download_chunk = [&](size_t b) {  // chunk [b, b + chunk) of the shard into its half
      const size_t n = std::min(shard.end, b + chunk) - b, half = (b - shard.begin) / chunk % 2;
      downloaded[half] = dev.staging.download(offload_grads.data() + half * chunk,
                                              grads + (b - shard.begin), n * sizeof(float));
      if (staged_params)
        downloaded[half] = dev.staging.download(offload_params.data() + half * chunk, params + b,
                                                n * sizeof(float));
    };
    if (staged && shard.size() > 0) {
      progress.mark("the update on the host, a staging chunk at a time (--offload)");
      download_chunk(shard.begin);
    }
    for (size_t b = shard.begin; b < shard.end; b += chunk) {
      const size_t e = std::min(shard.end, b + chunk), half = (b - shard.begin) / chunk % 2;
      float* p = params;
      size_t p_offset = 0;
      const float* g = grads;
      size_t g_offset = shard.begin;
      if (staged) {
        if (e < shard.end) download_chunk(e);
        dev.staging.wait(downloaded[half]);
        g = offload_grads.data() + half * chunk;
        g_offset = b;
      }
      if (staged_params) {
        p = offload_params.data() + half * chunk;
        p_offset = b;
      }
      if (opts.optimizer == Optimizer::adamw8bit)
        update.adamw8bit_update(
            adamw_tensors,
            {b, e, p, p_offset, g, g_offset, adamw8bit.m_codes.data(), adamw8bit.v_codes.data(),
             adamw8bit.m_absmax.data(), adamw8bit.v_absmax.data(), shard.begin},
            acfg, lr, grad_scale, s);
      else
        update.adamw_update(adamw_tensors,
                            {b, e, p, p_offset, g, g_offset, m.data(), v.data(), shard.begin}, acfg,
                            lr, grad_scale, s);
      if (staged_params) dev.staging.upload(params + b, p, (e - b) * sizeof(float));
    }
    if (staged_params) dev.staging.wait_all();  // the next forward reads the parameters
    progress.mark("the parameter all-gather (dp)");
    sync->gather_params(model->params.data());
    model->parameters_changed();
  }
  const double nan = std::numeric_limits<double>::quiet_NaN();
  return {loss,
          norm,
          lr,
          executor->timing().busy_s,
          executor->timing().total_s,
          used_scale > 0 ? used_scale : nan,
          skipped};
}

double Trainer::loss_in_fixed_order() {
  // Each shard's sum at its place, one rank's value among zeros (so the all-reduce is exact), then
  // the tree: the last stage of each DP rank holds its shards' losses (on every TP rank).
  const int per = tc.micro_batches, shards = per * opts.layout.dp;
  std::vector<double> all(size_t(shards), 0.0);
  if (last_stage() && grid.coords.tp_rank == 0)  // TP ranks hold the same losses
    std::copy(shard_losses.begin(), shard_losses.end(),
              all.begin() + ptrdiff_t(grid.coords.dp_rank) * per);
  std::fill(shard_losses.begin(), shard_losses.end(), 0.0);
  grid.world.allreduce_sum(all.data(), all.size());
  return tree_sum(shards, [&](int s) { return all[size_t(s)]; });
}

EvalResult Trainer::evaluate() {
  double sum = 0.0;
  int64_t correct = 0, terms = 0;
  const bool classifier = is_labelled_data(data.kind);
  for (int e = 0; e < tc.eval_batches; ++e) {
    terms +=
        data.loss_terms(io::Split::val, tc.seed, e, tc.batch_size, model->loss_terms_per_sample());
    progress.mark("evaluation (pipeline messages over pp, TP all-reduces over tp)");
    data.fill(io::Split::val, tc.seed, e, first_row, local_rows);
    walk = {0, 0, 0.0f, 0.0f, classifier ? &correct : nullptr, false};
    const double batch_sum = executor->run(eval_actions, eval_sends, work, false);
    sum += tc.bitwise ? loss_in_fixed_order() : batch_sum;
  }
  if (!tc.bitwise) sum = sum_over_stages_and_dp(sum);
  correct = sum_over_stages_and_dp(correct);
  const double samples = double(tc.eval_batches) * tc.batch_size;
  return {sum / double(terms),
          classifier ? double(correct) / samples : std::numeric_limits<double>::quiet_NaN()};
}

double Trainer::evaluate_bleu() {
  const char* what = "validation BLEU (rank 0 translates, the others wait in a broadcast)";
  progress.mark(what);
  double score = 0;
  std::string error;
  if (is_root()) {
    try {  // a failure here must reach the other ranks, which wait in the broadcasts below
      MPITRON_REQUIRE(bleu_codec.has_value(), "BLEU evaluation without the pairs' codec");
      score = validation_bleu(*model, *bleu_codec, data.pairs, tc.bleu_lines, tc.seq_len,
                              [&] { progress.mark(what); });
    } catch (const std::exception& e) {
      error = std::string("validation BLEU: ") + e.what();
    }
  }
  progress.calls.note("MPI_Bcast", "world");
  comm::throw_on_all_ranks(error, 0, MPI_COMM_WORLD);
  MPI_CHECK(MPI_Bcast(&score, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD));
  return score;
}

}  // namespace mpitron
