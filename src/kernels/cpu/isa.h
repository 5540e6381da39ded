// The instruction-set level the CPU kernels run at, chosen once per process at run time.
//
// One binary runs on every x86-64 CPU with AVX2 + FMA (x86-64-v3) and on every aarch64 CPU. Each
// SIMD kernel is written once against Google Highway and compiled for every level below
// (foreach_target.h); the first kernel call picks the best level the CPU reports (cpuid on x86,
// getauxval on aarch64), or the lower one STRATA_CPU_ISA names, and every call after that runs
// that level's code. The levels, best first:
//   x86:     avx512bf16  AVX-512 with the bf16 dot product (Zen 4/5, Sapphire Rapids and later):
//                        the hand-tiled vdpbf16ps flash attention and oneDNN's bf16 matmul
//            avx512      AVX-512 F/BW/DQ/VL (Skylake-SP to Ice Lake): Highway's AVX3 target
//            avx2        AVX2 + FMA (Haswell, Zen 1-3, client CPUs): Highway's AVX2 target
//   aarch64: sve2, sve, neon (Highway's SVE2, SVE and NEON targets)
// Below avx512bf16 the bf16 products widen their operands to f32 and run the f32 kernels (the
// same bf16 roundings of the inputs, f32 speed): no CPU without bf16 hardware runs a slow bf16
// GEMM.
#pragma once
#include <string>
#include <vector>

namespace strata::kernels::isa {

enum class Level { avx2, avx512, avx512bf16, neon, sve, sve2 };

const char* name(Level level);
// One line for logs and reports: "avx512bf16 (AVX-512 + bf16 dot products)".
std::string describe(Level level);

// Levels this CPU can run, best first (never empty on a CPU at or above the floor).
std::vector<Level> supported();

// The level every kernel runs at. Chosen on the first call: the best supported level, or the one
// STRATA_CPU_ISA names. An unknown name, or a level this CPU cannot run, throws strata::Error
// with what to do; the CLI calls this at start-up so that it fails there, before any work.
Level active();

// Whether the CPU multiplies bf16 natively at the active level (oneDNN's bf16 matmul and the
// vdpbf16ps attention tiles); otherwise bf16 products widen to f32.
bool native_bf16();

// Whether the CPU is AMD's (cpuid's vendor string; false off x86-64): the GEMM library's choice
// (gemm.cc) depends on it.
bool amd_cpu();

// Where the level came from: "cpu" (the best this CPU has) or "STRATA_CPU_ISA".
const char* source();

}  // namespace strata::kernels::isa
