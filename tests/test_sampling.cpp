// The sampler of mpitron generate (src/train/sampling.hpp) and the validation loop of mpitron eval
// (src/train/eval_data.hpp): greedy at temperature 0, top-k and top-p cuts, the draw a uniform
// number picks, the same text for the same seed; evaluate_split against a hand-written loop.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <vector>

#include "base/gemm.hpp"
#include "base/philox.hpp"
#include "src/model/family.hpp"
#include "src/train/batch_source.hpp"
#include "src/train/eval_data.hpp"
#include "src/train/sampling.hpp"

namespace mpitron {
namespace {

TEST(Sampling, TemperatureZeroIsTheArgMax) {
  const std::vector<float> logits{0.1f, 2.5f, -1.0f, 2.4f, 0.0f};
  for (float u : {0.0f, 0.3f, 0.999f}) EXPECT_EQ(sample_token(logits.data(), 5, 0.0, 0, 1.0, u), 1);
  EXPECT_EQ(sample_token(logits.data(), 5, -1.0, 3, 0.5, 0.7f), 1);  // below 0 is greedy too
}

TEST(Sampling, TopKOneAndTinyTopPAreGreedy) {
  const std::vector<float> logits{0.1f, 2.5f, -1.0f, 2.4f, 0.0f};
  for (float u : {0.0f, 0.5f, 0.999f}) {
    EXPECT_EQ(sample_token(logits.data(), 5, 1.0, 1, 1.0, u), 1);
    EXPECT_EQ(sample_token(logits.data(), 5, 1.0, 0, 1e-6, u), 1);
  }
}

TEST(Sampling, UniformNumberPicksWithinTheKeptMass) {
  // Probabilities 2/3 (id 1) and 1/3 (id 0): u below 2/3 draws id 1, above it id 0.
  const std::vector<float> logits{0.0f, float(std::log(2.0))};
  EXPECT_EQ(sample_token(logits.data(), 2, 1.0, 0, 1.0, 0.0f), 1);
  EXPECT_EQ(sample_token(logits.data(), 2, 1.0, 0, 1.0, 0.6f), 1);
  EXPECT_EQ(sample_token(logits.data(), 2, 1.0, 0, 1.0, 0.7f), 0);
  EXPECT_EQ(sample_token(logits.data(), 2, 1.0, 0, 1.0, 0.999f), 0);
  // Temperature 2 flattens them to sqrt(2) : 1, so u = 0.6 now draws id 0 (0.6 > 0.586).
  EXPECT_EQ(sample_token(logits.data(), 2, 2.0, 0, 1.0, 0.55f), 1);
  EXPECT_EQ(sample_token(logits.data(), 2, 2.0, 0, 1.0, 0.6f), 0);
  // top-k 2 of three ids never draws the third, whatever u.
  const std::vector<float> three{1.0f, 0.9f, 0.8f};
  for (int i = 0; i < 100; ++i)
    EXPECT_NE(sample_token(three.data(), 3, 1.0, 2, 1.0, float(i) / 100.0f), 2);
}

// What generate does: a Philox stream keyed by the seed gives u for draw i.
std::vector<int> draws(uint64_t seed, int top_k, double temperature) {
  std::vector<float> logits(50);
  for (int v = 0; v < 50; ++v) logits[v] = float(std::sin(0.37 * v)) * 3.0f;
  const PhiloxStream rng{seed, fnv1a64("generate")};
  std::vector<int> out;
  for (int i = 0; i < 64; ++i)
    out.push_back(
        sample_token(logits.data(), 50, temperature, top_k, 0.95, rng.uniform(uint64_t(i))));
  return out;
}

TEST(Sampling, SameSeedSameDraws) {
  EXPECT_EQ(draws(42, 10, 0.8), draws(42, 10, 0.8));
  EXPECT_NE(draws(42, 10, 0.8), draws(43, 10, 0.8));
  for (int id : draws(7, 5, 1.3)) EXPECT_TRUE(id >= 0 && id < 50);
}

// evaluate_split over text equals the loop it replaced: fill the validation batch b, forward.
TEST(EvalData, TextValidationMatchesAHandLoop) {
  cpu::set_compute_threads(1);
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "mpitron_test_eval_data";
  fs::create_directories(dir);
  const std::string path = (dir / "text.txt").string();
  {
    std::ofstream f(path, std::ios::binary);
    for (int i = 0; i < 40000; ++i) f.put(char('a' + (i * 7919 + i / 13) % 26));
  }
  ModelConfig cfg = default_model_config("gpt");
  const int B = 2, T = 16;
  DeviceAllocator alloc;
  BatchSource data = BatchSource::load(cfg, path, T, B, alloc);
  ModelBuild how;
  how.micro_rows = B;
  how.seq_len = T;
  how.seed = 3;
  how.alloc = &alloc;
  std::unique_ptr<Model> model = build_model(cfg, how);
  const EvalTotals t = evaluate_split(*model, data, 256, EvalPlan{3, B, T, 11, false});
  EXPECT_EQ(t.batches, 3);
  EXPECT_EQ(t.samples, 3 * B);
  EXPECT_TRUE(t.confusion.empty());
  EXPECT_EQ(t.correct, 0);
  double sum = 0;
  for (int b = 0; b < 3; ++b) {
    data.fill(io::Split::val, 11, b, 0, B);
    MicroBatch mb;
    mb.samples = data.view(0, B);
    sum += model->forward(mb);
  }
  EXPECT_EQ(t.loss_sum, sum);
  EXPECT_TRUE(std::isfinite(t.loss_sum) && t.loss_sum > 0);
  // An untrained model is near chance: mean loss about ln 256.
  const double mean = t.loss_sum / (double(t.samples) * model->loss_terms_per_sample());
  EXPECT_NEAR(mean, std::log(256.0), 1.0);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace mpitron
