#pragma once
#include <functional>
namespace emu {
void run_grid(dim3 grid, unsigned threads, const std::function<void()>& body);
template <class K, class... Args>
void launch(K kernel, dim3 grid, unsigned threads, size_t, cudaStream_t, Args... args) {
  run_grid(grid, threads, [=] { kernel(args...); });
}
// Warp collectives (mma_tile.cuh replacements).
void ldsm_x4(uint32_t (&r)[4], const void* p, bool trans);
void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
}  // namespace emu
