// Choosing the kernels' instruction-set level (isa.h): what the CPU reports, what STRATA_CPU_ISA
// asks for, and the two libraries told to stay at that level (Highway's dispatch and oneDNN's JIT).
#include "kernels/cpu/isa.h"

#include <hwy/highway.h>  // HWY_TARGETS
#include <hwy/targets.h>

#include <cstdlib>
#include <cstring>
#include <dnnl.hpp>

#include "core/error.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace strata::kernels::isa {

namespace {

// avx512_bf16 is CPUID leaf 7, sub-leaf 1, EAX bit 5. Highway 1.0's targets do not cover it, so
// it is read here, on top of Highway's AVX3 (which also checks that the OS saves the registers).
[[maybe_unused]] bool cpu_has_avx512bf16() {  // called on x86-64 only
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 1, &a, &b, &c, &d)) return false;
  return (a >> 5) & 1u;
#else
  return false;
#endif
}

// AMD's "AuthenticAMD" in cpuid leaf 0 (EBX, EDX, ECX = "Auth", "enti", "cAMD").
[[maybe_unused]] bool cpu_vendor_is_amd() {  // called on x86-64 only
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return false;
  return b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u;
#else
  return false;
#endif
}

// Highway targets better than `level`, to be disabled so that its dispatch picks `level`.
int64_t targets_above(Level level) {
  switch (level) {
    case Level::avx2:
      return HWY_AVX3 | HWY_AVX3_DL;
    case Level::neon:
      return HWY_SVE | HWY_SVE2 | HWY_SVE_256 | HWY_SVE2_128;
    case Level::sve:
      return HWY_SVE2 | HWY_SVE2_128;
    default:
      return 0;
  }
}

// oneDNN is capped at the same level, so that a forced level runs the GEMMs that CPU would run.
void cap_onednn(Level level) {
  dnnl::cpu_isa cap = dnnl::cpu_isa::all;
  if (level == Level::avx2) cap = dnnl::cpu_isa::avx2;
  if (level == Level::avx512) cap = dnnl::cpu_isa::avx512_core;
  if (cap == dnnl::cpu_isa::all) return;
  // Fails only once oneDNN has generated code; by then the first choice stands, and it was the
  // same one (this runs once, before the first kernel).
  try {
    dnnl::set_max_cpu_isa(cap);
  } catch (const dnnl::error&) {
  }
}

struct Choice {
  Level level;
  const char* source;
};

Choice choose() {
  const std::vector<Level> have = supported();
  STRATA_CHECK(!have.empty(),
               "this CPU has none of strata's kernel levels (x86-64: AVX2 + FMA at least; "
               "aarch64: NEON)");
  Choice choice{have.front(), "cpu"};
  if (const char* env = std::getenv("STRATA_CPU_ISA"); env && *env) {
    const Level all[] = {Level::avx2, Level::avx512, Level::avx512bf16,
                         Level::neon, Level::sve,    Level::sve2};
    const Level* found = nullptr;
    for (const Level& l : all)
      if (std::strcmp(env, name(l)) == 0) found = &l;
    std::string names;
    for (Level l : have) names += std::string(names.empty() ? "" : ", ") + name(l);
    STRATA_CHECK(found != nullptr, "STRATA_CPU_ISA=", env, " is not a kernel level; this CPU runs ",
                 names, " (unset it to use the best)");
    bool ok = false;
    for (Level l : have) ok = ok || l == *found;
    STRATA_CHECK(ok, "STRATA_CPU_ISA=", env, ": this CPU cannot run that level; it runs ", names,
                 " (unset it to use the best)");
    choice = {*found, "STRATA_CPU_ISA"};
  }
  if (const int64_t above = targets_above(choice.level)) hwy::DisableTargets(above);
  cap_onednn(choice.level);
  return choice;
}

const Choice& chosen() {
  static const Choice choice = choose();  // thread-safe; a throw leaves it to the next call
  return choice;
}

}  // namespace

const char* name(Level level) {
  switch (level) {
    case Level::avx2:
      return "avx2";
    case Level::avx512:
      return "avx512";
    case Level::avx512bf16:
      return "avx512bf16";
    case Level::neon:
      return "neon";
    case Level::sve:
      return "sve";
    case Level::sve2:
      return "sve2";
  }
  return "?";
}

std::string describe(Level level) {
  switch (level) {
    case Level::avx2:
      return "avx2 (AVX2 + FMA, 8-float vectors)";
    case Level::avx512:
      return "avx512 (AVX-512, 16-float vectors; bf16 widened to f32)";
    case Level::avx512bf16:
      return "avx512bf16 (AVX-512 + bf16 dot products)";
    case Level::neon:
      return "neon (Arm NEON, 4-float vectors)";
    case Level::sve:
      return "sve (Arm SVE, scalable vectors)";
    case Level::sve2:
      return "sve2 (Arm SVE2, scalable vectors)";
  }
  return "?";
}

std::vector<Level> supported() {
  // What the CPU has and the build compiled (HWY_TARGETS: every level unless STRATA_NATIVE
  // narrowed it), read before any disabling, once.
  static const int64_t targets = hwy::SupportedTargets() & HWY_TARGETS;
  std::vector<Level> levels;
#if defined(__x86_64__)
  if (targets & (HWY_AVX3 | HWY_AVX3_DL)) {
    if (cpu_has_avx512bf16()) levels.push_back(Level::avx512bf16);
    levels.push_back(Level::avx512);
  }
  if (targets & HWY_AVX2) levels.push_back(Level::avx2);
#elif defined(__aarch64__)
  if (targets & (HWY_SVE2 | HWY_SVE2_128)) levels.push_back(Level::sve2);
  if (targets & (HWY_SVE | HWY_SVE_256)) levels.push_back(Level::sve);
  if (targets & HWY_NEON) levels.push_back(Level::neon);
#endif
  return levels;
}

Level active() {
  return chosen().level;
}

bool amd_cpu() {
  static const bool amd = cpu_vendor_is_amd();
  return amd;
}

bool native_bf16() {
  return active() == Level::avx512bf16;
}

const char* source() {
  return chosen().source;
}

}  // namespace strata::kernels::isa
