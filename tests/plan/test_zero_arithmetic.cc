// The textbook formulas (plan/zero_arithmetic.h) reproduce the numbers their papers print.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "plan/zero_arithmetic.h"

namespace strata {
namespace {

// Rounds to the digits the paper prints (x.y GB, or x.yz below 1 GB in Table 1).
double printed(double bytes, double digits) {
  const double gb = bytes / 1e9, scale = std::pow(10.0, digits);
  return std::round(gb * scale) / scale;
}

// ZeRO, Figure 1: a 7.5B-parameter model on 64 GPUs with mixed-precision Adam (K = 12).
TEST(ZeroArithmetic, Figure1SevenAndAHalfBillionOn64Gpus) {
  const double psi = 7.5e9, nd = 64;
  EXPECT_EQ(printed(zero_model_state_bytes(0, psi, nd), 0), 120);
  EXPECT_EQ(printed(zero_model_state_bytes(1, psi, nd), 1), 31.4);
  EXPECT_EQ(printed(zero_model_state_bytes(2, psi, nd), 1), 16.6);
  EXPECT_EQ(printed(zero_model_state_bytes(3, psi, nd), 1), 1.9);
  // The formulas themselves, exactly: (2+2+K)Ψ, 4Ψ + KΨ/Nd, 2Ψ + (2+K)Ψ/Nd, (2+2+K)Ψ/Nd.
  EXPECT_DOUBLE_EQ(zero_model_state_bytes(0, psi, nd), 16 * psi);
  EXPECT_DOUBLE_EQ(zero_model_state_bytes(1, psi, nd), 4 * psi + 12 * psi / nd);
  EXPECT_DOUBLE_EQ(zero_model_state_bytes(2, psi, nd), 2 * psi + 14 * psi / nd);
  EXPECT_DOUBLE_EQ(zero_model_state_bytes(3, psi, nd), 16 * psi / nd);
}

// ZeRO, Table 1: the 7.5B column (P_os, P_os+g, P_os+g+p in GB) against the DP degree.
TEST(ZeroArithmetic, Table1SevenAndAHalfBillionColumn) {
  struct Row {
    double nd, os, os_g, os_g_p;
  };
  const Row rows[] = {{1, 120, 120, 120},     {4, 52.5, 41.3, 30},     {16, 35.6, 21.6, 7.5},
                      {64, 31.4, 16.6, 1.88}, {256, 30.4, 15.4, 0.47}, {1024, 30.1, 15.1, 0.12}};
  for (const Row& r : rows) {
    EXPECT_EQ(printed(zero_model_state_bytes(1, 7.5e9, r.nd), 1), r.os) << "Nd " << r.nd;
    EXPECT_EQ(printed(zero_model_state_bytes(2, 7.5e9, r.nd), 1), r.os_g) << "Nd " << r.nd;
    EXPECT_EQ(printed(zero_model_state_bytes(3, 7.5e9, r.nd), r.os_g_p < 2 ? 2 : 1), r.os_g_p)
        << "Nd " << r.nd;
  }
  EXPECT_THROW(zero_model_state_bytes(4, 1e9, 8), Error);
}

// Korthikanti et al. 2022, section 5: selective recomputation drops the 5as/h term, which is 80
// of 114 (70%) for GPT-3 (a = 96, s = 2048, h = 12288) and 64 of 98 (65%) for MT-NLG
// (a = 128, h = 20480).
TEST(ZeroArithmetic, KorthikantiSelectiveSavings) {
  struct Model {
    double a, h, percent;
  };
  for (const Model& m : {Model{96, 12288, 70}, Model{128, 20480, 65}}) {
    const double s = 2048, b = 1;
    const double none =
        korthikanti_layer_activation_bytes(s, b, m.h, m.a, 1, false, Recompute::none);
    const double selective =
        korthikanti_layer_activation_bytes(s, b, m.h, m.a, 1, false, Recompute::selective);
    EXPECT_DOUBLE_EQ(none, s * b * m.h * (34 + 5 * m.a * s / m.h));
    EXPECT_DOUBLE_EQ(selective, 34 * s * b * m.h);
    EXPECT_EQ(std::round(100 * (none - selective) / none), m.percent);
  }
}

// Table 2's other rows: tensor parallelism divides all but the 10sbh replicated before the
// column-parallel GEMMs; sequence parallelism divides everything; full recomputation keeps the
// 16-bit layer input only.
TEST(ZeroArithmetic, KorthikantiTensorAndSequenceParallel) {
  const double s = 2048, b = 4, h = 12288, a = 96, t = 8, sbh = s * b * h;
  EXPECT_DOUBLE_EQ(korthikanti_layer_activation_bytes(s, b, h, a, t, false, Recompute::none),
                   sbh * (10 + 24 / t + 5 * a * s / (h * t)));
  EXPECT_DOUBLE_EQ(korthikanti_layer_activation_bytes(s, b, h, a, t, true, Recompute::none),
                   korthikanti_layer_activation_bytes(s, b, h, a, 1, false, Recompute::none) / t);
  EXPECT_DOUBLE_EQ(korthikanti_layer_activation_bytes(s, b, h, a, t, false, Recompute::selective),
                   sbh * (10 + 24 / t));
  EXPECT_DOUBLE_EQ(korthikanti_layer_activation_bytes(s, b, h, a, t, true, Recompute::selective),
                   34 * sbh / t);
  EXPECT_DOUBLE_EQ(korthikanti_layer_activation_bytes(s, b, h, a, t, true, Recompute::full),
                   2 * sbh);
  // sp without tp is no sequence parallelism at all.
  EXPECT_DOUBLE_EQ(korthikanti_layer_activation_bytes(s, b, h, a, 1, true, Recompute::none),
                   korthikanti_layer_activation_bytes(s, b, h, a, 1, false, Recompute::none));
}

}  // namespace
}  // namespace strata
