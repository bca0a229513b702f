// MPI test of checkpoints of tensor-parallel shards: ranks form a TP (x DP) layout, hold a
// strided (3C, C) tensor, a column-split (C, 4C) one, a replicated (C) one and a padded vocabulary
// (V = 11, C), write parameters (one DP replica, replicated tensors once) and ZeRO-style moments
// (flat ranges cut anywhere) with shard_blocks, and read the file back into registries of another
// TP degree and another cut, which must equal their own initialisation bit for bit (initialisation
// is a pure function of the global index). Replicas that must not write hold wrong values, so a
// stray write shows.
// Usage: mpiexec -n N mpi_tp_checkpoint [work folder]; exit 0 when every check passes.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "comm/mpi_check.hpp"
#include "io/checkpoint.hpp"
#include "src/model/registry.hpp"
#include "src/train/model_checkpoint.hpp"
#include "tests/mpi_expect.hpp"

namespace fs = std::filesystem;
using namespace mpitron;
using namespace mpitron::mpi_test;

namespace {

constexpr int64_t C = 8, V = 11;
constexpr uint64_t kSeed = 1234;
constexpr float kSentinel = -12345.0f;

bool same_bits(float a, float b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

ParamRegistry make_registry(int tp, int tp_rank) {
  ParamRegistry reg(RegistrySlice{tp, tp_rank});
  ShardSpec vocab;
  vocab.tp_dim = 0;
  vocab.tp_pad = true;
  reg.add("wte.weight", {V, C}, InitKind::normal, 0.02f, false, vocab);
  reg.add("h.0.attn.c_attn.weight", {3 * C, C}, InitKind::normal, 0.02f, true, {0, 3});
  reg.add("h.0.ln_1.weight", {C}, InitKind::normal, 1.0f, false);
  reg.add("h.0.mlp.c_proj.weight", {C, 4 * C}, InitKind::normal, 0.02f, true, {1});
  reg.add_buffer("bn.running_mean", {2 * C}, InitKind::normal, {0});
  reg.add_buffer("bn.count", {5}, InitKind::normal);
  return reg;
}

// What a layout holds: parameters, buffers and moments, each a pure function of global indices.
struct State {
  ParamRegistry reg;
  std::vector<float> params, buffers, m, v;  // m, v: the whole flat allocation
};

State make_state(int tp, int tp_rank) {
  State s{make_registry(tp, tp_rank), {}, {}, {}, {}};
  s.params.assign(s.reg.size(), kSentinel);
  s.m.assign(s.reg.size(), kSentinel);
  s.v.assign(s.reg.size(), kSentinel);
  s.reg.initialize(s.params.data(), kSeed);
  s.reg.initialize(s.m.data(), kSeed + 1);
  s.reg.initialize(s.v.data(), kSeed + 2);
  s.buffers.assign(s.reg.buffer_size(), kSentinel);
  for (const ParamInfo& p : s.reg.buffers())  // add_buffer has no std: values from the index
    for (size_t i = 0; i < p.numel; ++i)
      s.buffers[p.offset + i] = p.is_padding(i) ? 0.0f : 0.5f * float(p.global_index(i)) + 1.0f;
  return s;
}

// ZeRO-style cut of a flat allocation of n elements into `parts` ranges at arbitrary points
// (variant 0 for writing, 1 for reading): part r is [cut(r), cut(r + 1)).
size_t cut(int r, int parts, size_t n, int variant) {
  if (r <= 0) return 0;
  if (r >= parts) return n;
  const int64_t base = int64_t(n) * r / parts;
  const int64_t at = variant == 0 ? base + 7 * r - 3 : base - 5 * r + 2;
  return size_t(std::clamp<int64_t>(at, 0, int64_t(n)));
}

struct Layout {
  int tp, dp, tp_rank, dp_rank;
};

Layout layout(int tp) {
  return {tp, g_size / tp, g_rank % tp, g_rank / tp};
}

std::string name_of(const Layout& l) {
  return "tp" + std::to_string(l.tp) + "_dp" + std::to_string(l.dp);
}

void write(const std::string& path, const Layout& l, io::CheckpointIo transport) {
  State s = make_state(l.tp, l.tp_rank);
  // Replicas that must write nothing hold wrong values: a stray write would show on reading.
  for (const ParamInfo& p : s.reg.params())
    if (l.dp_rank > 0 || (p.shard.tp_dim < 0 && l.tp_rank != 0))
      for (size_t i = 0; i < p.numel; ++i) s.params[p.offset + i] += 1.0f;
  for (const ParamInfo& p : s.reg.buffers())
    if (l.dp_rank > 0 || (p.shard.tp_dim < 0 && l.tp_rank != 0))
      for (size_t i = 0; i < p.numel; ++i) s.buffers[p.offset + i] += 1.0f;
  for (const ParamInfo& p : s.reg.params())
    if (p.shard.tp_dim < 0 && l.tp_rank != 0)
      for (size_t i = 0; i < p.numel; ++i) s.m[p.offset + i] += 1.0f, s.v[p.offset + i] += 1.0f;

  const ShardRange shard{cut(l.dp_rank, l.dp, s.reg.size(), 0),
                         cut(l.dp_rank + 1, l.dp, s.reg.size(), 0)};
  std::vector<float> m(s.m.begin() + shard.begin, s.m.begin() + shard.end);
  std::vector<float> v(s.v.begin() + shard.begin, s.v.begin() + shard.end);

  std::vector<io::TensorPiece> pieces =
      parameter_pieces(s.reg, s.params.data(), s.buffers.data(), l.dp_rank == 0, true);
  for (const io::TensorPiece& t : pieces) {
    const ParamInfo& p = s.reg.at(t.dataset.substr(t.dataset.find('/') + 1));
    const bool writes = l.dp_rank == 0 && (p.shard.tp_dim >= 0 || l.tp_rank == 0);
    EXPECT(t.blocks.empty() != writes, "%s: blocks on a replica (%s)", t.dataset.c_str(),
           name_of(l).c_str());
  }
  for (auto& t : moment_pieces(s.reg, shard, m.data(), v.data(), true, true))
    pieces.push_back(std::move(t));
  io::write_checkpoint(path, {{"format_version", int64_t{1}}}, {}, pieces, MPI_COMM_WORLD,
                       transport);
}

// Reads the file into layout l's registry (ZeRO moments cut differently from the writer's) and
// compares with l's own initialisation: real elements equal bit for bit, padding untouched.
void read_and_check(const std::string& path, const Layout& l, const std::string& what) {
  const State want = make_state(l.tp, l.tp_rank);
  std::vector<float> params(want.reg.size(), kSentinel), buffers(want.reg.buffer_size(), kSentinel);
  const ShardRange shard{cut(l.dp_rank, l.dp, want.reg.size(), 1),
                         cut(l.dp_rank + 1, l.dp, want.reg.size(), 1)};
  std::vector<float> m(shard.size(), kSentinel), v(shard.size(), kSentinel);
  std::vector<io::TensorPiece> pieces =
      parameter_pieces(want.reg, params.data(), buffers.data(), true, false);
  for (auto& t : moment_pieces(want.reg, shard, m.data(), v.data(), true, false))
    pieces.push_back(std::move(t));
  io::read_checkpoint_tensors(path, pieces);

  auto check = [&](const ParamInfo& p, const char* kind, const float* got, const float* expect,
                   size_t begin, size_t end) {  // flat range [begin, end) of p's allocation
    int bad = 0;
    for (size_t f = std::max(begin, p.offset); f < std::min(end, p.offset + p.numel); ++f) {
      const size_t i = f - p.offset;
      const float g = got[f - begin];
      const float e = p.is_padding(i) ? kSentinel : expect[f];
      if (!same_bits(g, e) && bad++ < 3)
        EXPECT(false, "%s: %s %s local element %zu (global %llu%s) read at %s: got %g want %g",
               what.c_str(), kind, p.name.c_str(), i,
               static_cast<unsigned long long>(p.global_index(i)),
               p.is_padding(i) ? ", padding" : "", name_of(l).c_str(), g, e);
    }
    if (bad > 3) EXPECT(false, "%s: %d more mismatches in %s", what.c_str(), bad - 3, kind);
  };
  for (const ParamInfo& p : want.reg.params()) {
    check(p, "param", params.data(), want.params.data(), 0, params.size());
    check(p, "m", m.data(), want.m.data(), shard.begin, shard.end);
    check(p, "v", v.data(), want.v.data(), shard.begin, shard.end);
  }
  for (const ParamInfo& p : want.reg.buffers())
    check(p, "buffer", buffers.data(), want.buffers.data(), 0, buffers.size());
}

}  // namespace

int main(int argc, char** argv) {
  mpitron::init_mpi(&argc, &argv);
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &g_rank));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &g_size));
  const fs::path dir =
      argc > 1 ? fs::path(argv[1]) : fs::temp_directory_path() / "mpitron_mpi_tp_checkpoint";
  const fs::path run = dir / ("np" + std::to_string(g_size));
  if (g_rank == 0) fs::remove_all(run);
  MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));

  // Every TP degree dividing the world: the writers (tp = world, tp = world / 2 with DP replicas,
  // tp 1 with ZeRO cuts only) and the readers (each of them, so always a different one too).
  std::vector<int> degrees;
  for (int tp = g_size; tp >= 1; --tp)
    if (g_size % tp == 0 && (tp == g_size || tp == g_size / 2 || tp == 1)) degrees.push_back(tp);
  std::vector<std::pair<std::string, io::CheckpointIo>> transports = {
      {"gather", io::CheckpointIo::gather}};
#ifdef MPITRON_PARALLEL_HDF5
  transports.push_back({"collective", io::CheckpointIo::collective});
#endif

  try {
    for (const auto& [io_name, transport] : transports)
      for (int wtp : degrees) {
        const Layout w = layout(wtp);
        const std::string path = (run / (name_of(w) + "_" + io_name) / "ckpt_1.h5").string();
        write(path, w, transport);
        const io::CheckpointHeader h = io::read_checkpoint_header(path);
        EXPECT(h.shapes.count("params/wte.weight") &&
                   h.shapes.at("params/wte.weight") == (std::vector<int64_t>{V, C}),
               "wte.weight not at its global shape in %s", path.c_str());
        EXPECT(
            h.shapes.count("optim/h.0.attn.c_attn.weight/m") &&
                h.shapes.at("optim/h.0.attn.c_attn.weight/m") == (std::vector<int64_t>{3 * C, C}),
            "c_attn moments not at their global shape in %s", path.c_str());
        for (int rtp : degrees)
          read_and_check(path, layout(rtp), "written at " + name_of(w) + " (" + io_name + ")");
        MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));  // all reads done before the next write
      }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] unexpected exception: %s\n", g_rank, e.what());
    ++g_failures;
  }

  const int status = mpi_test_finish("mpi_tp_checkpoint", run);
  mpitron::finalize_mpi();
  return status;
}
