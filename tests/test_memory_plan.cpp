// The memory plan's parts: the counting allocator's cap (--max-device-memory), the size parser,
// and a GPT stage's counted bytes against what building that stage allocates.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "base/allocator.hpp"
#include "src/model/config.hpp"
#include "src/model/family.hpp"
#include "src/model/gpt.hpp"
#include "src/train/memory_plan.hpp"

using namespace mpitron;

TEST(DeviceMemoryCap, RefusesAnAllocationPastItNamingWhatAndWhere) {
  DeviceAllocator alloc;
  alloc.limit_bytes = 1000;
  alloc.rank = 3;
  alloc.planned_bytes = 900;
  Buffer<float> a(alloc, 200);  // 800 bytes: under the cap
  AllocationPurpose purpose(alloc, "the AdamW moments");
  try {
    Buffer<float> b(alloc, 51);  // 1004 bytes in all
    FAIL() << "an allocation past the cap was made";
  } catch (const DeviceMemoryExceeded& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("rank 3: 204.0 B for the AdamW moments"), std::string::npos) << what;
    EXPECT_NE(what.find("past --max-device-memory 1000.0 B"), std::string::npos) << what;
    EXPECT_NE(what.find("peak so far 800.0 B"), std::string::npos) << what;
    EXPECT_NE(what.find("the plan predicts a peak of 900.0 B"), std::string::npos) << what;
  }
  EXPECT_EQ(alloc.current_bytes, 800u);
  Buffer<float> c(alloc, 50);  // exactly at the cap
  EXPECT_EQ(alloc.current_bytes, 1000u);
}

// A device with no room left (a GPU's cudaMalloc failing) stops the rank with the same kind of
// line: rank, size, purpose, peak so far, and what the device said.
void* no_room(size_t) {
  throw DeviceOutOfMemory("the GPU had 3.0 of 32768.0 MiB free");
}
void never_released(void*) {}

TEST(DeviceMemoryCap, DeviceOutOfMemoryNamesRankPurposeAndPeak) {
  DeviceAllocator alloc;
  alloc.device = "cuda";
  alloc.rank = 5;
  alloc.planned_bytes = 4096;
  alloc.current_bytes = 1024;
  alloc.peak_bytes = 2048;
  alloc.raw_allocate = no_room;
  alloc.raw_release = never_released;
  AllocationPurpose purpose(alloc, "the gradients");
  try {
    alloc.allocate(512);
    FAIL() << "an allocation the device refused was made";
  } catch (const DeviceMemoryExceeded& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("rank 5: out of cuda memory: 512.0 B for the gradients (in use 1.0 KiB, "
                        "peak so far 2.0 KiB; the plan predicts a peak of 4.0 KiB): the GPU had "
                        "3.0 of 32768.0 MiB free"),
              std::string::npos)
        << what;
  }
  EXPECT_EQ(alloc.current_bytes, 1024u);
  EXPECT_EQ(alloc.allocations, 0u);
}

TEST(DeviceMemoryCap, PurposeIsScoped) {
  DeviceAllocator alloc;
  {
    AllocationPurpose outer(alloc, "outer");
    {
      AllocationPurpose inner(alloc, "inner");
      EXPECT_STREQ(alloc.purpose, "inner");
    }
    EXPECT_STREQ(alloc.purpose, "outer");
  }
  EXPECT_STREQ(alloc.purpose, "a buffer");
}

TEST(ParseByteSize, UnitsAndErrors) {
  EXPECT_EQ(parse_byte_size("11GiB", "--cap"), size_t(11) << 30);
  EXPECT_EQ(parse_byte_size("512 MiB", "--cap"), size_t(512) << 20);
  EXPECT_EQ(parse_byte_size("1.5GB", "--cap"), size_t(1500000000));
  EXPECT_EQ(parse_byte_size("4096", "--cap"), size_t(4096));
  EXPECT_EQ(parse_byte_size("2kib", "--cap"), size_t(2048));
  for (const char* bad : {"", "GiB", "11XB", "-1GiB", "1e400", "nan"})
    EXPECT_THROW(parse_byte_size(bad, "--cap"), UsageError) << bad;
}

// The counted bytes of a GPT stage are exactly what building it takes from the allocator.
TEST(GptModelMemory, EqualsTheBuildsAllocation) {
  ModelConfig cfg = to_model_config(GptConfig{3, 4, 64, 32, 259});
  struct Case {
    DType precision;
    bool recompute;
    int slots, stage, stages, head_chunk_rows = 0;
  };
  for (const Case c :
       {Case{DType::f32, false, 1, 0, 1}, Case{DType::bf16, false, 2, 0, 1},
        Case{DType::f32, true, 3, 0, 1}, Case{DType::f32, false, 2, 0, 2},
        Case{DType::f32, false, 2, 1, 2}, Case{DType::f16, true, 1, 0, 1},
        Case{DType::f32, false, 2, 0, 1, 17}, Case{DType::bf16, true, 2, 1, 2, 40}}) {
    ModelBuild how;
    how.micro_rows = 3;
    how.seq_len = 24;
    how.slots = c.slots;
    how.recompute = c.recompute;
    how.precision = c.precision;
    how.flat_align = 48;
    how.head_chunk_rows = c.head_chunk_rows;
    how.slice = RegistrySlice{1, 0, c.stage, c.stages, {}};
    how.slice.chunks = {c.stages == 1  ? BlockRange{0, 3}
                        : c.stage == 0 ? BlockRange{0, 2}
                                       : BlockRange{2, 3}};
    const ModelMemory m = gpt_model_memory(cfg, how);
    DeviceAllocator alloc;
    how.alloc = &alloc;
    auto model = build_model(cfg, how);
    EXPECT_EQ(model->flat_size, m.flat_size);
    EXPECT_EQ(model->weight_copy_bytes(), m.weight_copy_bytes);
    EXPECT_EQ(alloc.current_bytes, (m.flat_size + m.buffer_elements) * sizeof(float) +
                                       m.weight_copy_bytes + m.activation_bytes)
        << "precision " << precision_name(c.precision) << ", recompute " << c.recompute
        << ", slots " << c.slots << ", stage " << c.stage << " of " << c.stages;
    EXPECT_EQ(model->segments.size(), m.segments.size());
    EXPECT_EQ(m.logit_bytes > 0, c.stage == c.stages - 1);
  }
}

// The chunked LM head computes the unchunked head's losses and gradients (the logits' rows in
// other groupings: the same products, wte's gradient summed over chunks), and holds one chunk of
// logits instead of a micro-batch's per slot.
TEST(ChunkedLmHead, MatchesTheWholeHead) {
  const ModelConfig cfg = to_model_config(GptConfig{2, 4, 64, 32, 259});
  const int rows = 3, T = 24, N = rows * T;
  std::vector<int32_t> tokens(size_t(rows) * (T + 1));
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((i * 7919 + 13) % 259);
  struct Run {
    double loss = 0;
    std::vector<float> grads;
    size_t bytes = 0;
  };
  auto run = [&](int head_chunk_rows) {
    DeviceAllocator alloc;
    ModelBuild how;
    how.micro_rows = rows;
    how.seq_len = T;
    how.seed = 5;
    how.slots = 2;
    how.alloc = &alloc;
    how.head_chunk_rows = head_chunk_rows;
    auto model = build_model(cfg, how);
    Run r;
    r.bytes = alloc.current_bytes;
    r.grads.assign(model->flat_size, 0.0f);
    float* g = r.grads.data();
    model->bind_gradients([g](size_t offset) { return g + offset; });
    MicroBatch mb;
    mb.samples.tokens = tokens.data();
    mb.samples.rows = rows;
    mb.training = true;
    r.loss = model->forward(mb);
    model->backward(mb, 1.0f / N, {});
    if (head_chunk_rows > 0 && head_chunk_rows < N) {
      EXPECT_THROW(model->output(0), UsageError);
    }
    return r;
  };
  const Run whole = run(0);
  for (const int chunk : {20, 1, 71, 72}) {
    const Run part = run(chunk);
    EXPECT_NEAR(part.loss, whole.loss, 1e-6 * std::abs(whole.loss)) << "chunk " << chunk;
    double worst = 0, scale = 0;
    for (size_t i = 0; i < whole.grads.size(); ++i) {
      worst = std::max(worst, double(std::abs(part.grads[i] - whole.grads[i])));
      scale = std::max(scale, double(std::abs(whole.grads[i])));
    }
    EXPECT_LT(worst, 1e-5 * scale) << "chunk " << chunk;
    // Two slots of 72 x 259 fp32 logits held whole; one buffer of `chunk` rows chunked.
    if (chunk < N) {
      EXPECT_LT(part.bytes, whole.bytes) << "chunk " << chunk;
    }
  }
}
