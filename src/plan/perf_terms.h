// Bytes per element that strata's memory-bound kernels move (reads + writes), as the performance
// model counts them. calibrate.cc times the same kernels and divides these counts by the time, so
// a calibrated profile's memory rate and the model's byte counts agree by construction.
#pragma once

namespace strata::perf {

constexpr double kNormForward = 8;    // per element of [rows, C]: read x, write y
constexpr double kNormBackward = 20;  // read dy, x; read-modify-write dx (+ dw, db partials)
constexpr double kResidualAdd = 12;   // y += x: read both, write y
constexpr double kBiasCopy = 4;       // the bias broadcast into y before the GEMM accumulates
constexpr double kBiasGrad = 4;       // column sums of dy
constexpr double kGeluForward = 8;    // per element of [rows, F]
constexpr double kGeluBackward = 12;
constexpr double kSwigluForward = 12;  // per output element of [rows, F]: read gate, up; write y
constexpr double kSwigluBackward = 20;
constexpr double kRope = 8;              // per rotated element (q and k), each direction
constexpr double kToLowp = 6;            // f32 -> 16-bit (or back): read 4, write 2
constexpr double kCrossEntropy = 16;     // per logit, forward + backward (max, sum-exp, dlogits)
constexpr double kVocabParallelCe = 20;  // the vocab-parallel kernels: one more pass
constexpr double kEmbeddingForward = 8;  // per element of [rows, C]
constexpr double kEmbeddingBackward = 12;
// Naive attention keeps the probabilities: per causal score, written and re-read in forward
// (scores, softmax in place), read and rewritten as dS in backward.
constexpr double kAttentionProbsForward = 8;
constexpr double kAttentionProbsBackward = 16;
// Mixture-of-Experts (model/moe_ffn.cc), per element of the [rows, C] expert rows (rows = the
// tokens' top_k choices) or of the [n, C] tokens:
constexpr double kMoeGather = 8;            // a row permutation: read a row, write it (per row elt)
constexpr double kMoeCombineForward = 4;    // read each row (+ 4 per token element written)
constexpr double kMoeCombineBackward = 12;  // read dy and the row's output, write its gradient
constexpr double kMoeScatterBackward = 4;   // read each row's gradient (+ 4 per token element)
constexpr double kMoeRouterForward = 12;    // per router logit: softmax, top-k, balancing losses
constexpr double kMoeRouterBackward = 12;   // per router logit
// Context attention (model/context_attention.cc), per element of the [n, 2 nkv hd] key/value
// block (ring) or of the exchanged [n, width] tensor (Ulysses):
constexpr double kContextCopy = 8;  // a relayout: k|v packed or unpacked, Ulysses' (un)staging
constexpr double kContextZero = 4;  // an accumulator zeroed
constexpr double kRingMerge = 12;   // per [n, nh hd] element: two partial outputs read, one written
constexpr double kRingGradAdd = 12;  // an arriving gradient accumulator added to this step's
constexpr double kAdamW = 28;        // per parameter: read p, g, m, v; write p, m, v (f32)
constexpr double kGradNorm = 4;      // per gradient element: one read
constexpr double kZeroGrads = 4;

}  // namespace strata::perf
