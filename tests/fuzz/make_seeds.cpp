// Writes the HDF5 seed inputs of fuzz_checkpoint and fuzz_trace with mpitron's own writers, so the
// seeds are exactly what the readers meet in practice: tiny, but with every kind of tensor,
// attribute and trace column. Usage: fuzz_make_seeds CORPUS_DIR (writes checkpoint/, trace/ and a
// token file in text_data/).
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "io/checkpoint.hpp"
#include "io/dataset.hpp"
#include "io/trace.hpp"

int main(int argc, char** argv) {
  using namespace mpitron::io;
  namespace fs = std::filesystem;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  mpitron::init_mpi(&argc, &argv);
  const fs::path out = argv[1];
  fs::create_directories(out / "checkpoint");
  fs::create_directories(out / "trace");

  // A checkpoint: a scalar, a vector, a matrix, a 3-D tensor and an optimizer moment.
  std::vector<float> scalar{1.5f}, bias(3), weight(2 * 3), cube(2 * 2 * 2), moment(3);
  for (size_t i = 0; i < weight.size(); ++i) weight[i] = 0.25f * float(i);
  for (size_t i = 0; i < cube.size(); ++i) cube[i] = -float(i);
  auto whole = [](const std::string& name, std::vector<int64_t> shape, std::vector<float>& v) {
    return TensorPiece{name, shape, flat_range_blocks(shape, 0, numel(shape)), v.data()};
  };
  const std::vector<TensorPiece> tensors = {
      whole("params/ln_f.gain", {}, scalar), whole("params/h.0.mlp.bias", {3}, bias),
      whole("params/h.0.mlp.weight", {2, 3}, weight), whole("params/h.1.conv", {2, 2, 2}, cube),
      whole("optim/h.0.mlp.bias/m", {3}, moment)};
  const Attributes root = {{"step", int64_t(7)},
                           {"model.type", std::string("gpt")},
                           {"model.n_layer", int64_t(2)},
                           {"train.lr", 0.001},
                           {"tokens_seen", int64_t(4096)}};
  const std::map<std::string, Attributes> groups = {{"rng", {{"seed", int64_t(1337)}}},
                                                    {"data", {{"checksum", int64_t(-5)}}}};
  write_checkpoint((out / "checkpoint" / "ckpt_7.h5").string(), root, groups, tensors,
                   MPI_COMM_WORLD, CheckpointIo::gather);

  // A trace of three rows (one evaluated, two with per-rank columns), then a resumed segment.
  const std::string trace = (out / "trace" / "trace.h5").string();
  auto row = [](int64_t step, bool ranks) {
    TraceRow r;
    r.step = step;
    r.loss = 5.0 / double(step);
    r.val_loss = step == 2 ? 4.5 : std::nan("");
    r.val_accuracy = std::nan("");
    r.lr = 1e-3;
    r.grad_norm = 0.5;
    r.tokens_per_s = 1000;
    r.step_s = 0.1;
    r.comm_bytes = 64 * step;
    r.peak_mem_bytes = 1 << 20;
    r.param_bytes = 4096;
    r.bubble = 0.25;
    if (ranks) r.rank_comm_bytes = r.rank_peak_mem_bytes = r.rank_busy_us = {10, 20};
    return r;
  };
  {
    TraceWriter w(trace, {{"model.type", std::string("gpt")}, {"dp", int64_t(2)}}, -1, 1);
    for (int64_t s = 1; s <= 3; ++s) w.append(row(s, s > 1));
  }
  {
    TraceWriter w(trace, {{"model.type", std::string("gpt")}, {"dp", int64_t(1)}}, 2, 1);
    w.append(row(3, false));
  }
  // A token file of 40 tokens (vocabulary 300), behind the seq_len byte fuzz_text_data expects.
  std::vector<int32_t> ids(40);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(i * 7 % 300);
  TokenFileInfo info;
  info.vocab_size = 300;
  info.tokenizer = "gpt2";
  info.tokenizer_format = "gpt2-bpe";
  info.source = "seed.txt";
  info.source_bytes = 120;
  info.tokens = int64_t(ids.size());
  info.checksum = token_checksum(ids.data(), ids.size());
  const std::string tokens = (out / "text_data" / "tokens.h5").string();
  fs::create_directories(out / "text_data");
  write_token_file(tokens, ids, info);
  mpitron::finalize_mpi();
  return 0;
}
