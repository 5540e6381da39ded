#include "plan/zero_arithmetic.h"

#include "core/error.h"

namespace strata {

double zero_model_state_bytes(int stage, double psi, double nd, double k) {
  STRATA_CHECK(nd >= 1, "ZeRO arithmetic: the data-parallel degree must be at least 1, got ", nd);
  switch (stage) {
    case 0:
      return (2 + 2 + k) * psi;
    case 1:
      return (2 + 2) * psi + k * psi / nd;
    case 2:
      return 2 * psi + (2 + k) * psi / nd;
    case 3:
      return (2 + 2 + k) * psi / nd;
    default:
      fail("ZeRO arithmetic: stage ", stage, " does not exist (0, 1, 2 or 3)");
  }
}

double korthikanti_layer_activation_bytes(double s, double b, double h, double a, double t,
                                          bool sequence_parallel, Recompute mode) {
  const double sbh = s * b * h;
  const bool sp = sequence_parallel && t > 1;
  switch (mode) {
    case Recompute::none:
      return sp ? sbh / t * (34 + 5 * a * s / h) : sbh * (10 + 24 / t + 5 * a * s / (h * t));
    case Recompute::selective:
      return sp ? sbh * 34 / t : sbh * (10 + 24 / t);
    case Recompute::full:
      return 2 * sbh;
  }
  return 0;
}

}  // namespace strata
