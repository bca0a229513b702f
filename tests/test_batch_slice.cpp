// DP ranks and micro-batches cover every row of the global batch exactly once.
#include <gtest/gtest.h>

#include <vector>

#include "src/train/batch_slice.hpp"

using namespace mpitron;

TEST(BatchSlice, CoversTheGlobalBatchExactlyOnce) {
  int checked = 0;
  for (int64_t rows = 1; rows <= 96; ++rows)
    for (int dp = 1; dp <= 8; ++dp)
      for (int mb = 1; mb <= 6; ++mb) {
        if (!check_batch_split(rows, dp, mb).empty()) {
          EXPECT_NE(rows % (dp * mb), 0);
          continue;
        }
        std::vector<int> hits(rows, 0);
        int64_t expected_begin = 0;
        for (int r = 0; r < dp; ++r)
          for (int m = 0; m < mb; ++m) {
            RowRange s = batch_slice(rows, dp, r, mb, m);
            EXPECT_EQ(s.count, rows / (dp * mb));
            EXPECT_EQ(s.begin, expected_begin) << "slices must be consecutive in rank order";
            expected_begin += s.count;
            for (int64_t i = s.begin; i < s.begin + s.count; ++i) {
              ASSERT_GE(i, 0);
              ASSERT_LT(i, rows);
              ++hits[i];
            }
          }
        for (int64_t i = 0; i < rows; ++i) ASSERT_EQ(hits[i], 1) << rows << " " << dp << " " << mb;
        ++checked;
      }
  EXPECT_GT(checked, 300);
}

TEST(BatchSlice, RefusesUnevenSplits) {
  EXPECT_NE(check_batch_split(10, 3, 1), "");
  EXPECT_NE(check_batch_split(12, 2, 5), "");
  EXPECT_NE(check_batch_split(0, 1, 1), "");
  EXPECT_NE(check_batch_split(8, 0, 1), "");
  EXPECT_EQ(check_batch_split(24, 3, 4), "");
  EXPECT_NE(check_batch_split(8, 2, 3).find("not divisible by dp (2) x micro-batches (3)"),
            std::string::npos);
}
