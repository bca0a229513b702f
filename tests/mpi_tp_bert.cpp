// The tensor-parallel encoder (BERT) at tp = world size (1, 2, 4): its TP regions against the
// fused per-layer reference and its traffic against the formula. (1) One encoder block, regions
// (BlockShape::tp_per_layer off) against per-layer (on): forward sends 2 all-reduces of B·T·C
// (the two row-parallel outputs) in both; backward 2 with regions (the attention input, whose
// q, k and v share one, and the MLP input) and 4 per-layer (q, k, v and c_fc each). The input
// gradient and every parameter gradient agree to fp32 round-off, bitwise at tp 1, and the
// input gradient is bitwise the same on every TP rank. (2) The masked-LM model: one step's TP
// bytes, forward and backward apart, against the formula; losses equal to the tp 1 model's to
// 1e-5 over training steps with dropout; replicated tensors bitwise equal on every TP rank.
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/gemm.hpp"
#include "comm/grid.hpp"
#include "comm/mpi_check.hpp"
#include "src/cpu/adamw.hpp"
#include "src/cpu/step_ops.hpp"
#include "src/model/bert.hpp"
#include "src/model/family.hpp"
#include "src/model/transformer_block.hpp"
#include "src/train/grad_sync.hpp"
#include "src/train/step_backend.hpp"
#include "tests/mpi_expect.hpp"

using namespace mpitron;
using namespace mpitron::mpi_test;

namespace {

using Vec = std::vector<float>;

Vec randn(size_t n, unsigned seed, float scale, float mean = 0.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(mean, scale);
  Vec v(n);
  for (float& x : v) x = d(gen);
  return v;
}

// max|a - b| / max|b|: norm-wise, as a gradient element may cancel while its round-off does not.
double rel_diff(const Vec& a, const Vec& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, double(std::fabs(a[i] - b[i])));
    den = std::max(den, double(std::fabs(b[i])));
  }
  return den > 0 ? num / den : num;
}

bool same_bits(const Vec& a, const Vec& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// One encoder block's tensors on this rank: the TP-split ones differ by rank (any per-rank values
// make a valid sharded block), the replicated ones are the same on every rank.
struct BlockTensors {
  std::vector<Vec> t;  // q_w q_b k_w k_b v_w v_b proj_w proj_b ln1_w ln1_b fc_w fc_b mproj_w
                       // mproj_b ln2_w ln2_b, in EncoderBlockWeights' order
  BlockTensors(int C, int Cl, int rank, bool zeros) {
    const size_t sizes[16] = {size_t(Cl) * C,     size_t(Cl), size_t(Cl) * C,     size_t(Cl),
                              size_t(Cl) * C,     size_t(Cl), size_t(C) * Cl,     size_t(C),
                              size_t(C),          size_t(C),  size_t(4) * Cl * C, size_t(4) * Cl,
                              size_t(C) * 4 * Cl, size_t(C),  size_t(C),          size_t(C)};
    const bool split[16] = {1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 0, 0, 0};
    const bool ln_weight[16] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0};
    for (int i = 0; i < 16; ++i) {
      const unsigned seed = 100 + unsigned(i) + (split[i] ? 1000u * unsigned(rank + 1) : 0u);
      t.push_back(zeros ? Vec(sizes[i], 0.0f)
                        : randn(sizes[i], seed, ln_weight[i] ? 0.1f : 0.2f, ln_weight[i]));
    }
  }
  EncoderBlockWeights view() {
    float* p[16];
    for (int i = 0; i < 16; ++i) p[i] = t[size_t(i)].data();
    return {p[0], p[1], p[2],  p[3],  p[4],  p[5],  p[6],  p[7],
            p[8], p[9], p[10], p[11], p[12], p[13], p[14], p[15]};
  }
};

struct BlockRun {
  Vec dx;                  // dL/dx
  std::vector<Vec> grads;  // every parameter gradient
  uint64_t forward_bytes = 0, backward_bytes = 0;
};

// One forward and backward of an encoder block at tp = tp.size(), regions or per-layer.
BlockRun run_block(comm::Group& tp, bool per_layer) {
  const int B = 2, T = 8, C = 32, NH = 4, N = B * T, p = tp.size(), Cl = C / p;
  tp::TpComm group;
  group.group = &tp;
  BlockShape s{B, T, C, NH, false, nullptr, &group, 1e-12};
  s.tp_per_layer = per_layer;
  BlockTensors w(C, Cl, tp.rank(), false), dw(C, Cl, tp.rank(), true);
  BlockActs a{};
  BlockScratch d{};
  ActivationCarver count;
  block_acts_carve(a, count, s);
  block_scratch_carve(d, count, s);
  Vec arena(count.used + 16, 0.0f);
  ActivationCarver hand{arena.data()};
  block_acts_carve(a, hand, s);
  block_scratch_carve(d, hand, s);
  const Vec x = randn(size_t(N) * C, 7, 1.0f);
  const BlockDropout drop{0.1f, PhiloxStream{3, 1}, PhiloxStream{3, 2}, 0};

  BlockRun r;
  uint64_t before = tp.bytes_sent;
  encoder_block_forward(a, x.data(), w.view(), s, drop);
  r.forward_bytes = tp.bytes_sent - before;
  r.dx = randn(size_t(N) * C, 9, 1.0f);  // dL/d(block output) on entry
  before = tp.bytes_sent;
  encoder_block_backward(r.dx.data(), dw.view(), d, a, x.data(), w.view(), s, drop);
  r.backward_bytes = tp.bytes_sent - before;
  r.grads = dw.t;
  return r;
}

void check_block(comm::Group& tp) {
  const int p = tp.size(), r = tp.rank();
  const size_t NC = size_t(2) * 8 * 32;
  const uint64_t ar = comm::allreduce_bytes_sent(NC, sizeof(float), p, r);
  const BlockRun region = run_block(tp, false), fused = run_block(tp, true);

  EXPECT(region.forward_bytes == 2 * ar && fused.forward_bytes == 2 * ar,
         "forward bytes: regions %llu, per-layer %llu, formula 2 B·T·C all-reduces %llu",
         (unsigned long long)region.forward_bytes, (unsigned long long)fused.forward_bytes,
         (unsigned long long)(2 * ar));
  EXPECT(region.backward_bytes == 2 * ar,
         "backward bytes with regions: %llu, formula 2 B·T·C all-reduces (attention input, MLP "
         "input) %llu; 4 would mean q, k and v all-reduce on their own again",
         (unsigned long long)region.backward_bytes, (unsigned long long)(2 * ar));
  EXPECT(fused.backward_bytes == 4 * ar, "backward bytes per-layer: %llu, formula 4 B·T·C: %llu",
         (unsigned long long)fused.backward_bytes, (unsigned long long)(4 * ar));

  if (p == 1) {
    EXPECT(same_bits(region.dx, fused.dx), "tp 1: regions' dL/dx differs from per-layer's bits");
    for (size_t i = 0; i < region.grads.size(); ++i)
      EXPECT(same_bits(region.grads[i], fused.grads[i]),
             "tp 1: gradient %zu differs from per-layer's bits", i);
  } else {
    const double e = rel_diff(region.dx, fused.dx);
    EXPECT(e < 1e-5, "dL/dx: regions against per-layer %.3e", e);
    double worst = 0;
    for (size_t i = 0; i < region.grads.size(); ++i)
      worst = std::max(worst, rel_diff(region.grads[i], fused.grads[i]));
    EXPECT(worst < 1e-5, "parameter gradients: regions against per-layer %.3e", worst);
    if (g_rank == 0)
      std::printf("tp %d block: regions against per-layer: dL/dx %.3e, gradients %.3e\n", p, e,
                  worst);
  }
  Vec root = region.dx;
  MPI_CHECK(MPI_Bcast(root.data(), int(root.size()), MPI_FLOAT, 0, tp.comm()));
  EXPECT(same_bits(root, region.dx), "dL/dx differs from TP rank 0's");
}

struct Trained {
  std::unique_ptr<Model> model;
  GradStorage grads;
  Buffer<float> m, v;
};

void check_model(comm::Grid& grid) {
  const int p = grid.tp.size(), r = grid.tp.rank();
  ModelConfig cfg = default_model_config("bert");
  const int L = 2, C = 32, B = 3, T = 16;
  cfg.dims["n_layer"] = L;
  cfg.dims["n_head"] = 4;
  cfg.dims["n_embd"] = C;
  cfg.dims["block_size"] = T;
  cfg.dims["vocab_size"] = 261;  // no tp above 1 divides it: padded rows
  cfg.dims["task"] = 0;
  DeviceAllocator alloc;
  auto build = [&](comm::Group* tp, int tp_size, int tp_rank) {
    ModelBuild how;
    how.micro_rows = B;
    how.seq_len = T;
    how.seed = 5;
    how.slice = RegistrySlice{tp_size, tp_rank};
    how.tp = tp;
    how.alloc = &alloc;
    Trained t;
    t.model = build_model(cfg, how);
    t.grads = GradStorage::full(*t.model, alloc);
    t.m = Buffer<float>(alloc, t.model->flat_size);
    t.v = Buffer<float>(alloc, t.model->flat_size);
    return t;
  };
  Trained par = build(&grid.tp, p, r);
  Trained ser = build(nullptr, 1, 0);
  std::vector<int32_t> tokens(size_t(B) * (T + 1));
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((i * 7919 + 13) % 256);
  const int M = B * bert_masked_per_sample(T);
  const double terms = double(M);

  uint64_t fwd = 0, bwd = 0;
  auto step = [&](Trained& t, int64_t s, bool count) {
    MicroBatch mb;
    mb.samples = {tokens.data(), nullptr, nullptr, B};
    mb.step = s;
    mb.data_step = s;
    mb.dropout = 0.1f;
    mb.seed = 11;
    cpu::zero(t.grads.data.data(), t.grads.data.size());
    const uint64_t b0 = grid.tp.bytes_sent;
    const double loss = t.model->forward(mb) / terms;
    const uint64_t b1 = grid.tp.bytes_sent;
    t.model->backward(mb, float(1.0 / terms), {});
    if (count) {
      fwd = b1 - b0;
      bwd = grid.tp.bytes_sent - b1;
    }
    cpu::adamw_update(adamw_tensors(t.model->registry),
                      {0, t.model->flat_size, t.model->params.data(), 0, t.grads.data.data(), 0,
                       t.m.data(), t.v.data(), 0},
                      AdamWConfig{}, 1e-2, 1.0f, s);
    return loss;
  };

  // The TP traffic of one step against the formula: forward, the embedding (B·T·C), two per
  // layer (B·T·C) and the cross-entropy's three row statistics (M masked rows); backward, the
  // tied decoder's input gradient (M·C) and two per layer (B·T·C): q, k and v share one.
  const double loss1 = step(par, 1, true);
  const size_t NC = size_t(B) * T * C;
  auto ar = [&](size_t n) { return comm::allreduce_bytes_sent(n, sizeof(float), p, r); };
  const uint64_t fwd_formula = (1 + 2 * uint64_t(L)) * ar(NC) + 3 * ar(size_t(M));
  const uint64_t bwd_formula = ar(size_t(M) * C) + 2 * uint64_t(L) * ar(NC);
  EXPECT(fwd == fwd_formula, "forward TP bytes %llu, formula (1 + 2L) B·T·C + 3 M: %llu",
         (unsigned long long)fwd, (unsigned long long)fwd_formula);
  EXPECT(bwd == bwd_formula, "backward TP bytes %llu, formula M·C + 2L B·T·C: %llu",
         (unsigned long long)bwd, (unsigned long long)bwd_formula);
  if (g_rank == 0)
    std::printf("tp %d bert step: forward %llu bytes, backward %llu bytes (per layer %llu each)\n",
                p, (unsigned long long)fwd, (unsigned long long)bwd,
                (unsigned long long)(2 * ar(NC)));

  double worst = std::fabs(loss1 - step(ser, 1, false)) / std::fabs(loss1);
  for (int64_t s = 2; s <= 5; ++s) {
    const double a = step(par, s, false), b = step(ser, s, false);
    worst = std::max(worst, std::fabs(a - b) / std::fabs(b));
  }
  if (g_rank == 0) std::printf("tp %d bert: largest relative loss difference %.3e\n", p, worst);
  EXPECT(worst < 1e-5, "losses differ from the tp 1 model's by %.3e", worst);

  for (const ParamInfo& q : par.model->registry.params()) {
    if (q.shard.tp_dim >= 0) continue;
    Vec mine(par.model->params.data() + q.offset, par.model->params.data() + q.offset + q.numel);
    Vec root = mine;
    MPI_CHECK(MPI_Bcast(root.data(), int(root.size()), MPI_FLOAT, 0, grid.tp.comm()));
    EXPECT(same_bits(mine, root), "%s differs from TP rank 0's", q.name.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  mpitron::init_mpi(&argc, &argv);
  int p = 0;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &g_rank));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &p));
  cpu::set_compute_threads(1);
  {
    comm::Grid grid = comm::make_grid(1, p, 1);
    check_block(grid.tp);
    check_model(grid);
    g_failures = mpi_test_failures();
    if (g_rank == 0)
      std::printf("mpi_tp_bert at tp %d: %s\n", p,
                  g_failures == 0 ? "all checks passed" : "FAILED");
  }
  mpitron::finalize_mpi();
  return g_failures == 0 ? 0 : 1;
}
