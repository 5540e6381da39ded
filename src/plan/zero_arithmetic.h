// The textbook formulas the memory model is compared with (docs/PLANNER.md). They describe GPU
// frameworks with 16-bit activations and dropout, not what strata allocates (memory_model.h
// follows the engine); the tests reproduce the numbers the papers print.
#pragma once
#include <cstdint>

#include "model/activations.h"

namespace strata {

// ZeRO (Rajbhandari et al. 2020, Figure 1 and Table 1): model-state bytes per device for psi
// parameters trained with mixed-precision Adam (2 bytes of 16-bit parameters, 2 of 16-bit
// gradients, K = 12 of optimizer state: f32 master weights, momentum and variance) on nd
// data-parallel devices:
//   stage 0 (baseline)  (2 + 2 + K) psi
//   stage 1 (P_os)      (2 + 2) psi + K psi / nd
//   stage 2 (P_os+g)    2 psi + (2 + K) psi / nd
//   stage 3 (P_os+g+p)  (2 + 2 + K) psi / nd
double zero_model_state_bytes(int stage, double psi, double nd, double k = 12);

// Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models",
// Table 2): activation bytes one transformer layer keeps for backward, with 16-bit activations
// and dropout, for sequence length s, micro-batch b, hidden size h, a attention heads and tensor
// parallelism t (with or without sequence parallelism):
//   none, t = 1       sbh (34 + 5as/h)
//   none, tp          sbh (10 + 24/t + 5as/(ht))
//   none, tp + sp     sbh/t (34 + 5as/h)
//   selective, tp     sbh (10 + 24/t)
//   selective, tp+sp  sbh (34/t)
//   full              2sbh (the layer input only)
double korthikanti_layer_activation_bytes(double s, double b, double h, double a, double t,
                                          bool sequence_parallel, Recompute mode);

}  // namespace strata
