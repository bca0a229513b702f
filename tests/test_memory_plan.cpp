// The memory plan's parts: the counting allocator's cap (--max-device-memory), the size parser,
// and a GPT stage's counted bytes against what building that stage allocates.
#include <gtest/gtest.h>

#include <string>

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
    int slots, stage, stages;
  };
  for (const Case c : {Case{DType::f32, false, 1, 0, 1}, Case{DType::bf16, false, 2, 0, 1},
                       Case{DType::f32, true, 3, 0, 1}, Case{DType::f32, false, 2, 0, 2},
                       Case{DType::f32, false, 2, 1, 2}, Case{DType::f16, true, 1, 0, 1}}) {
    if (c.stages > 1 && c.precision != DType::f32) continue;
    ModelBuild how;
    how.micro_rows = 3;
    how.seq_len = 24;
    how.slots = c.slots;
    how.recompute = c.recompute;
    how.precision = c.precision;
    how.flat_align = 48;
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
