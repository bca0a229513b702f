// MPI test of the checkpoint path: with 1..N ranks, each rank writes different flat ranges and
// 2-D blocks of several tensors (some ranks owning nothing), by collective MPI-IO and by
// gather-to-rank-0; then every tensor is read back on a different split and checked value by value.
// Usage: mpiexec -n N mpi_checkpoint_roundtrip [work folder]; exit 0 when every check passes.
#include <mpi.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "comm/mpi_check.hpp"
#include "io/checkpoint.hpp"
#include "tests/mpi_expect.hpp"

namespace fs = std::filesystem;
using namespace mpitron;
using namespace mpitron::mpi_test;
using namespace mpitron::io;

namespace {

float value_of(int tensor, int64_t flat) {
  return static_cast<float>(tensor * 10000 + 0.25 * flat);
}

int64_t numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// Flat indices of a block's elements in row-major order within the block.
std::vector<int64_t> block_indices(const std::vector<int64_t>& shape, const Block& b) {
  if (shape.empty()) return {0};
  std::vector<int64_t> out, idx(shape.size(), 0);
  const int64_t n = numel(b.count);
  for (int64_t e = 0; e < n; ++e) {
    int64_t f = 0;
    for (size_t k = 0; k < shape.size(); ++k) f = f * shape[k] + b.start[k] + idx[k];
    out.push_back(f);
    for (size_t k = shape.size(); k-- > 0;) {
      if (++idx[k] < b.count[k]) break;
      idx[k] = 0;
    }
  }
  return out;
}

struct Tensor {
  int id;
  std::string name;
  std::vector<int64_t> shape;
};

const std::vector<Tensor> kTensors = {
    {1, "params/wte.weight", {37, 11}},
    {2, "params/h.0.attn.c_attn.weight", {6, 8}},
    {3, "params/h.0.mlp.c_fc.weight", {5, 4, 3}},
    {4, "params/ln_f.scale", {}},
    {5, "params/ln_f.bias", {9}},
    {6, "optim/h.0.attn.c_attn.weight/m", {4, 6}},
    {7, "optim/wte.weight/v", {37, 11}},
};

// Uneven split of [0, n) into `parts`: part p gets [bound(p), bound(p+1)); with 3+ parts part 0
// is empty, as a ZeRO rank owning no slice of a small tensor would be.
int64_t bound(int64_t n, int p, int parts) {
  if (p >= parts) return n;
  if (parts >= 3 && p >= 1) --p, --parts;  // bound(1) == bound(0): part 0 empty
  if (p == 0) return 0;
  return n * (p * p) / (parts * parts);  // uneven: later parts larger
}

// This rank's blocks of tensor t for writing ("split" 0) or reading ("split" 1, a different one).
std::vector<Block> blocks_for(const Tensor& t, int split) {
  const int r = split == 0 ? g_rank : g_size - 1 - g_rank;
  const int64_t n = numel(t.shape);
  switch (t.id) {
    case 2: {  // column blocks, as a TP shard of a (out, in) weight split over "in"
      const int64_t c0 = t.shape[1] * r / g_size, c1 = t.shape[1] * (r + 1) / g_size;
      if (split == 1) {  // read by rows instead
        const int64_t r0 = t.shape[0] * r / g_size, r1 = t.shape[0] * (r + 1) / g_size;
        if (r1 == r0) return {};
        return {Block{{r0, 0}, {r1 - r0, t.shape[1]}}};
      }
      if (c1 == c0) return {};
      return {Block{{0, c0}, {t.shape[0], c1 - c0}}};
    }
    case 4:  // the scalar: the last rank writes it, the first reads it
      return (split == 0 ? g_rank == g_size - 1 : g_rank == 0) ? flat_range_blocks(t.shape, 0, 1)
                                                               : std::vector<Block>{};
    case 5:  // all on rank 0 (others own nothing)
      return r == 0 ? flat_range_blocks(t.shape, 0, n) : std::vector<Block>{};
    case 6: {  // two interleaved column blocks, listed right to left (not in flat order)
      std::vector<Block> out;
      for (int64_t c = t.shape[1] - 1; c >= 0; --c)
        if (c % g_size == r) out.push_back(Block{{0, c}, {t.shape[0], 1}});
      return out;
    }
    default: {  // flat ranges (ZeRO-style), split unevenly
      const int part = split == 0 ? g_rank : r;
      return flat_range_blocks(t.shape, bound(n, part, g_size), bound(n, part + 1, g_size));
    }
  }
}

struct Piece {
  TensorPiece piece;
  std::vector<float> data;
};

std::vector<Piece> make_pieces(int split, bool fill_values) {
  std::vector<Piece> out;
  for (const Tensor& t : kTensors) {
    Piece p;
    p.piece = TensorPiece{t.name, t.shape, blocks_for(t, split), nullptr};
    for (const Block& b : p.piece.blocks)
      for (int64_t f : block_indices(t.shape, b))
        p.data.push_back(fill_values ? value_of(t.id, f) : -1.0f);
    out.push_back(std::move(p));
  }
  for (Piece& p : out) p.piece.data = p.data.data();
  return out;
}

std::vector<TensorPiece> views(const std::vector<Piece>& pieces) {
  std::vector<TensorPiece> v;
  for (const Piece& p : pieces) v.push_back(p.piece);
  return v;
}

void check_file(const std::string& path, const Attributes& root,
                const std::map<std::string, Attributes>& groups) {
  EXPECT(fs::exists(path), "%s missing", path.c_str());
  EXPECT(!fs::exists(path + ".tmp"), "%s.tmp left behind", path.c_str());
  const CheckpointHeader h = read_checkpoint_header(path);
  EXPECT(h.root == root, "root attributes differ");
  EXPECT(h.groups == groups, "group attributes differ");
  for (const Tensor& t : kTensors)
    EXPECT(h.shapes.count(t.name) && h.shapes.at(t.name) == t.shape, "shape of %s", t.name.c_str());

  // A different split from the writer's.
  std::vector<Piece> mine = make_pieces(1, false);
  read_checkpoint_tensors(path, views(mine));
  for (size_t i = 0; i < kTensors.size(); ++i) {
    const Tensor& t = kTensors[i];
    size_t k = 0;
    for (const Block& b : mine[i].piece.blocks)
      for (int64_t f : block_indices(t.shape, b)) {
        EXPECT(mine[i].data[k] == value_of(t.id, f), "%s element %lld: got %g want %g",
               t.name.c_str(), static_cast<long long>(f), mine[i].data[k], value_of(t.id, f));
        ++k;
      }
  }
  // And every rank reads every tensor whole: nothing unwritten anywhere.
  for (const Tensor& t : kTensors) {
    std::vector<float> all(numel(t.shape), -1.0f);
    read_checkpoint_tensors(
        path,
        {TensorPiece{t.name, t.shape, flat_range_blocks(t.shape, 0, numel(t.shape)), all.data()}});
    for (int64_t f = 0; f < numel(t.shape); ++f)
      EXPECT(all[f] == value_of(t.id, f), "%s element %lld (whole read): got %g want %g",
             t.name.c_str(), static_cast<long long>(f), all[f], value_of(t.id, f));
  }
}

}  // namespace

int main(int argc, char** argv) {
  mpitron::init_mpi(&argc, &argv);
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &g_rank));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &g_size));
  const fs::path dir =
      argc > 1 ? fs::path(argv[1]) : fs::temp_directory_path() / "mpitron_mpi_checkpoint_roundtrip";
  const fs::path run = dir / ("np" + std::to_string(g_size));
  if (g_rank == 0) fs::remove_all(run);
  MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));

  const Attributes root = {{"format_version", int64_t{1}},
                           {"step", int64_t{40}},
                           {"model", std::string("gpt2")},
                           {"layout", std::string("dp" + std::to_string(g_size))},
                           {"lr", 6e-4}};
  const std::map<std::string, Attributes> groups = {
      {"rng", {{"seed", int64_t{1234}}}},
      {"data", {{"cursor", int64_t{77}}, {"file", std::string("bible.txt")}}}};
  const std::vector<Piece> pieces = make_pieces(0, true);

  try {
    std::vector<std::pair<std::string, CheckpointIo>> cases = {
        {(run / "gather" / "ckpt_40.h5").string(), CheckpointIo::gather}};
#ifdef MPITRON_PARALLEL_HDF5
    cases.push_back({(run / "collective" / "ckpt_40.h5").string(), CheckpointIo::collective});
#endif
    for (const auto& [path, io] : cases) {
      // Every rank hears of each tensor's write (the watchdog's beat during a long checkpoint).
      size_t written = 0;
      write_checkpoint(path, root, groups, views(pieces), MPI_COMM_WORLD, io, [&] { ++written; });
      EXPECT(written == pieces.size(), "%zu tensors written, the callback ran %zu times",
             pieces.size(), written);
      check_file(path, root, groups);
      MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));  // all reads done before the next write
    }
    // Default transport, overwriting the gathered checkpoint in place.
    write_checkpoint(cases[0].first, root, groups, views(pieces), MPI_COMM_WORLD);
    check_file(cases[0].first, root, groups);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] unexpected exception: %s\n", g_rank, e.what());
    ++g_failures;
  }

  const int status = mpi_test_finish("mpi_checkpoint_roundtrip", run);
  mpitron::finalize_mpi();
  return status;
}
