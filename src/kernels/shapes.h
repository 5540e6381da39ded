// Shapes that travel through the kernel seam as one value instead of positional integers (the
// kernel signatures of kernels/cpu/kernels.h, kernels/cuda/kernels.h and backend.h).
#pragma once
#include <cstdint>

namespace strata {

// The attention block of b sequences of t tokens: `heads` query heads and `kv_heads` key/value
// heads (grouped-query attention), each head_dim wide. The fused projection qkv is
// [b*t, (heads + 2*kv_heads) * head_dim]: q heads first, then k heads, then v heads.
struct AttentionShape {
  int64_t b = 0, t = 0, heads = 0, kv_heads = 0, head_dim = 0;

  int64_t rows() const { return b * t; }
  int64_t qkv_width() const { return (heads + 2 * kv_heads) * head_dim; }
  int64_t qk_heads() const { return heads + kv_heads; }  // the heads RoPE and head norms touch
};

// Attention of b items' tq query rows against a block of tk key rows with an explicit key range
// per query row (kernels/cpu/attention_ranges.h): nh query heads, nkv kv heads, head width hd.
struct RangeAttentionShape {
  int64_t b = 0, tq = 0, tk = 0, nh = 0, nkv = 0, hd = 0;
};

// A linear layer y[rows, out] = x[rows, in] . w[out, in]^T (+ bias): PyTorch's nn.Linear layout.
struct LinearShape {
  int64_t rows = 0, in = 0, out = 0;
};

// The buffers a linear layer's 16-bit path works in (unused by the f32 path): dy rounded to 16
// bits, `dy_capacity` elements (at least `out`: the backward goes through dy in blocks of rows),
// and an f32 scratch for kernels that widen 16-bit operands (kernels/cpu/lowp.cc).
struct LowpScratch {
  uint16_t* dy = nullptr;
  int64_t dy_capacity = 0;
  float* f32 = nullptr;
};

}  // namespace strata
