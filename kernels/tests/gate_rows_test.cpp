#include "kernels/gate_rows.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

namespace moe {
namespace {

// The H200's 132 SMs: bands of 528 rows.
TEST(GateRows, GemmRowsAreRoundedToEightThenToSixtyFourThenPaddedToBands) {
  EXPECT_EQ(gate_band_rows(132), 528);
  for (const std::int64_t rows : {1, 5, 7}) EXPECT_EQ(gate_gemm_rows(rows, 132), rows);
  EXPECT_EQ(gate_gemm_rows(8, 132), 8);
  EXPECT_EQ(gate_gemm_rows(9, 132), 16);
  EXPECT_EQ(gate_gemm_rows(249, 132), 256);
  EXPECT_EQ(gate_gemm_rows(256, 132), 256);
  EXPECT_EQ(gate_gemm_rows(257, 132), 320);
  EXPECT_EQ(gate_gemm_rows(1601, 132), 1664);
  EXPECT_EQ(gate_gemm_rows(1664, 132), 1664);
  EXPECT_EQ(gate_gemm_rows(2041, 132), 2048);
  EXPECT_EQ(gate_gemm_rows(2048, 132), 2048);
  EXPECT_EQ(gate_gemm_rows(2049, 132), 2112);
  EXPECT_EQ(gate_gemm_rows(2112, 132), 2112);
  EXPECT_EQ(gate_gemm_rows(2113, 132), 2640);
  EXPECT_EQ(gate_gemm_rows(8000, 132), 8448);
  // Another device's SMs set other bands.
  EXPECT_EQ(gate_gemm_rows(2049, 114), 2280);
  try {
    (void)gate_gemm_rows(4096, 0);
    ADD_FAILURE() << "no SM count accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "gate rows need the device's SM count, got 0");
  }
}

// Every row count where the GEMM's rows or softmax_topk's blocks per SM change is a step, and no
// other.
TEST(GateRows, StepsAreWhereTheGemmRowsOrTheBlocksPerSmChange) {
  for (const int sms : {132, 114}) {
    const auto steps = gate_time_steps("native", sms, 9000);
    const auto blocks_per_sm = [&](std::int64_t rows) {
      const std::int64_t blocks = (rows + kGateRowsPerBlock - 1) / kGateRowsPerBlock;
      return (blocks + sms - 1) / sms;
    };
    for (std::int64_t b = kGateRowAlignment; b < 9000; ++b) {
      const bool gemm_rows_change =
          b >= kGateFineRows && gate_gemm_rows(b, sms) != gate_gemm_rows(b + 1, sms);
      const bool changes = gemm_rows_change || blocks_per_sm(b) != blocks_per_sm(b + 1);
      EXPECT_EQ(std::binary_search(steps.begin(), steps.end(), b), changes) << sms << " " << b;
    }
  }
  const auto cublas = gate_time_steps("cublas_grouped", 132, 3000);
  EXPECT_EQ(cublas.size(), 29u + 5u);  // 256, 320, ..., 2048 and 528, 1056, 1584, 2112, 2640
  EXPECT_EQ(cublas.front(), 256);
  EXPECT_TRUE(std::binary_search(cublas.begin(), cublas.end(), 528));
  EXPECT_EQ(std::vector<std::int64_t>(cublas.end() - 3, cublas.end()),
            (std::vector<std::int64_t>{2048, 2112, 2640}));
  EXPECT_EQ(gate_time_steps("native", 132, 450), (std::vector<std::int64_t>{256, 320, 384, 448}));
  EXPECT_TRUE(gate_time_steps("cpu_reference", 0, 9000).empty());
  EXPECT_TRUE(gate_time_steps("staircase_model", 0, 9000).empty());
}

}  // namespace
}  // namespace moe
