// The tensor-parallel GPT as a whole, at tp = world size (1 to 4): (1) one forward and backward
// sends exactly the all-reduces Megatron's scheme promises, read from the TP byte counter:
// per block one in forward and one in backward for attention and for the MLP (4 of B·T·C), the
// vocab-parallel embedding one (B·T·C) in forward, the tied LM head one (B·T·C) in backward, and
// the vocab-parallel cross-entropy three of B·T (max, sum of exponentials, target logit);
// (2) after training steps with dropout, every tensor replicated over TP (LayerNorms, the
// row-parallel biases, wpe) is bitwise identical on every TP rank; (3) the loss of every step
// equals the tp 1 model's to 1e-5 (each rank also builds the unsharded model on MPI_COMM_SELF).
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "base/gemm.hpp"
#include "comm/grid.hpp"
#include "comm/mpi_check.hpp"
#include "src/cpu/adamw.hpp"
#include "src/cpu/step_ops.hpp"
#include "src/model/family.hpp"
#include "src/model/gpt.hpp"
#include "src/train/grad_sync.hpp"
#include "src/train/step_backend.hpp"
#include "tests/mpi_expect.hpp"

using namespace mpitron;
using namespace mpitron::mpi_test;

namespace {

struct Trained {
  std::unique_ptr<Model> model;
  GradStorage grads;
  Buffer<float> m, v;
};

}  // namespace

int main(int argc, char** argv) {
  mpitron::init_mpi(&argc, &argv);
  int p = 0;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &g_rank));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &p));
  cpu::set_compute_threads(1);
  {
    comm::Grid grid = comm::make_grid(1, p, 1);
    const GptConfig cfg{2, 4, 32, 16, 257};  // a vocabulary no tp above 1 divides
    const int B = 3, T = 16, L = cfg.n_layer;
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
      t.model = build_model(to_model_config(cfg), how);
      t.grads = GradStorage::full(*t.model, alloc);
      t.m = Buffer<float>(alloc, t.model->flat_size);
      t.v = Buffer<float>(alloc, t.model->flat_size);
      return t;
    };
    Trained par = build(&grid.tp, p, grid.tp.rank());
    Trained ser = build(nullptr, 1, 0);
    std::vector<int32_t> tokens(size_t(B) * (T + 1));
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((i * 7919 + 13) % 257);

    auto step = [&](Trained& t, int64_t s) {
      MicroBatch mb;
      mb.samples = {tokens.data(), nullptr, nullptr, B};
      mb.step = s;
      mb.dropout = 0.1f;
      mb.seed = 11;
      cpu::zero(t.grads.data.data(), t.grads.data.size());
      const double loss = t.model->forward(mb) / double(B * T);
      t.model->backward(mb, 1.0f / float(B * T), {});
      cpu::adamw_update(adamw_tensors(t.model->registry),
                        {0, t.model->flat_size, t.model->params.data(), 0, t.grads.data.data(), 0,
                         t.m.data(), t.v.data(), 0},
                        AdamWConfig{}, 1e-2, 1.0f, s);
      return loss;
    };

    // (1) the TP traffic of one step against the formula.
    const uint64_t before = grid.tp.bytes_sent;
    const double loss1 = step(par, 1);
    const uint64_t sent = grid.tp.bytes_sent - before;
    const size_t NC = size_t(B) * T * cfg.n_embd, N = size_t(B) * T;
    const int r = grid.tp.rank();
    const uint64_t expected = (4 * uint64_t(L) + 2) * comm::allreduce_bytes_sent(NC, 4, p, r) +
                              3 * comm::allreduce_bytes_sent(N, 4, p, r);
    EXPECT(sent == expected, "TP bytes of one step: %llu, formula (4L+2) B·T·C + 3 B·T: %llu",
           (unsigned long long)sent, (unsigned long long)expected);

    // (3) losses against the unsharded model, step by step.
    double worst = std::fabs(loss1 - step(ser, 1)) / std::fabs(loss1);
    for (int64_t s = 2; s <= 6; ++s) {
      const double a = step(par, s), b = step(ser, s);
      worst = std::max(worst, std::fabs(a - b) / std::fabs(b));
    }
    if (g_rank == 0)
      std::printf("tp %d: largest relative loss difference to tp 1: %.3e\n", p, worst);
    EXPECT(worst < 1e-5, "losses differ from the tp 1 model's by %.3e", worst);

    // (2) replicated tensors bitwise identical on every TP rank.
    int replicated = 0;
    for (const ParamInfo& q : par.model->registry.params()) {
      if (q.shard.tp_dim >= 0) continue;
      ++replicated;
      std::vector<float> mine(par.model->params.data() + q.offset,
                              par.model->params.data() + q.offset + q.numel);
      std::vector<float> root = mine;
      MPI_CHECK(MPI_Bcast(root.data(), int(root.size()), MPI_FLOAT, 0, grid.tp.comm()));
      EXPECT(std::memcmp(mine.data(), root.data(), mine.size() * sizeof(float)) == 0,
             "%s differs from TP rank 0's", q.name.c_str());
    }
    EXPECT(replicated == 3 + 6 * L, "%d replicated tensors, not wpe, ln_f and six per block",
           replicated);

    g_failures = mpi_test_failures();
    if (g_rank == 0)
      std::printf("mpi_tp_gpt at tp %d: %s\n", p, g_failures == 0 ? "all checks passed" : "FAILED");
  }
  mpitron::finalize_mpi();
  return g_failures == 0 ? 0 : 1;
}
