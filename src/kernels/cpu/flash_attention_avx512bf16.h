// The hand-tiled bf16 flash attention for CPUs with AVX-512 bf16 dot products (vdpbf16ps):
// flash_attention_avx512bf16.cc, x86-64 builds only. Called through flash_attention.h's _bf16
// functions when isa::native_bf16(); the portable kernel (flash_attention.cc) is its fallback
// and its test reference. Same semantics as flash_attention.h's _bf16 functions.
#pragma once
#include <cstdint>

// GCC only: the .cc enables AVX-512 for its own code with `#pragma GCC target`, which clang
// ignores; the clang builds (ThreadSanitizer, scripts/test_tsan.sh, compiles the AVX2 level only;
// the fuzz targets, STRATA_FUZZ) run the portable kernel instead.
#if defined(__x86_64__) && !defined(__clang__)
#define STRATA_HAVE_AVX512BF16_KERNELS 1
#else
#define STRATA_HAVE_AVX512BF16_KERNELS 0
#endif

namespace strata::kernels::avx512bf16 {

void flash_forward(float* out, float* lse, const uint16_t* qkv16, int64_t b, int64_t t, int64_t nh,
                   int64_t nkv, int64_t hd);
int64_t flash_backward_scratch(int64_t b, int64_t t, int64_t nh, int64_t nkv, int64_t hd,
                               int threads);
void flash_backward(float* dqkv, float* scratch, const float* dout, const uint16_t* qkv16,
                    const float* out, const float* lse, int64_t b, int64_t t, int64_t nh,
                    int64_t nkv, int64_t hd);

}  // namespace strata::kernels::avx512bf16
