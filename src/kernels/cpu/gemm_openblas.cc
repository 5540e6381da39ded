// OpenBLAS's cblas_sgemm as a GEMM backend (gemm_backends.h), loaded at run time with dlopen.
//
// Why dlopen rather than linking: OpenBLAS picks its kernels (its "core") once, in a library
// constructor, from the CPU or from OPENBLAS_CORETYPE. Loading it on first use lets a level forced
// with STRATA_CPU_ISA cap OpenBLAS the way it caps oneDNN (the core of that level, set before the
// load), and lets the one binary run where OpenBLAS is not installed (gemm() stays on oneDNN).
// The OpenMP build of OpenBLAS is loaded, so it shares strata's libgomp thread pool and follows
// omp_set_num_threads instead of starting a second pool.
#include <dlfcn.h>

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "core/error.h"
#include "kernels/cpu/gemm_backends.h"
#include "kernels/cpu/isa.h"

namespace strata::kernels::detail {

namespace {

using CoreName = char* (*)();

#if defined(__x86_64__)
#define STRATA_MULTIARCH "x86_64-linux-gnu"
#elif defined(__aarch64__)
#define STRATA_MULTIARCH "aarch64-linux-gnu"
#else
#define STRATA_MULTIARCH ""
#endif

// The core OpenBLAS names for a forced x86 level: the best kernels that level's instructions
// allow (OpenBLAS would otherwise pick the CPU's own and run AVX-512 under STRATA_CPU_ISA=avx2).
const char* core_for(isa::Level level) {
  if (std::strcmp(isa::source(), "STRATA_CPU_ISA") != 0) return nullptr;
  switch (level) {
    case isa::Level::avx2:
      return "Haswell";
    case isa::Level::avx512:
      return "SkylakeX";
    default:
      return nullptr;  // the best level, or aarch64: OpenBLAS's own choice
  }
}

// Cores whose sgemm kernels use at least AVX2 (lower case, as openblas_get_corename returns
// them). A core outside the list (OpenBLAS 0.3.21 does not know the CPU and fell back to its
// "prescott" SSE3 kernels, or OPENBLAS_CORETYPE names an old core) is several times slower than
// oneDNN, so the auto choice does not take the library then.
bool core_is_fast(const std::string& core) {
#if defined(__x86_64__)
  for (const char* ok : {"haswell", "zen", "skylakex", "cooperlake", "sapphirerapids"})
    if (core == ok) return true;
  return false;
#else
  return !core.empty() && core != "unknown";
#endif
}

OpenBlas load() {
  OpenBlas lib;
  if (const char* core = core_for(isa::active()); core && !std::getenv("OPENBLAS_CORETYPE"))
    setenv("OPENBLAS_CORETYPE", core, 0);  // read by the library's constructor, below
  void* handle = nullptr;
  for (const char* path :
       {"/usr/lib/" STRATA_MULTIARCH "/openblas-openmp/libopenblas.so.0", "libopenblas.so.0"}) {
    handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (handle) break;
  }
  if (!handle) {
    lib.why_not = "OpenBLAS is not installed (Debian: libopenblas0-openmp)";
    return lib;
  }
  void* sgemm = dlsym(handle, "cblas_sgemm");
  void* corename = dlsym(handle, "openblas_get_corename");
  if (!sgemm || !corename) {
    lib.why_not = "libopenblas.so.0 lacks cblas_sgemm or openblas_get_corename";
    return lib;
  }
  CoreName get_core;
  std::memcpy(&lib.sgemm, &sgemm, sizeof sgemm);
  std::memcpy(&get_core, &corename, sizeof corename);
  const char* core = get_core();
  for (const char* p = core ? core : ""; *p; ++p)
    lib.core += static_cast<char>(std::tolower(static_cast<unsigned char>(*p)));
  if (!core_is_fast(lib.core))
    lib.why_slow = "OpenBLAS runs its '" + lib.core +
                   "' kernels here (a CPU it does not know, or OPENBLAS_CORETYPE)";
  return lib;
}

}  // namespace

const OpenBlas& openblas() {
  static const OpenBlas lib = load();  // thread-safe, once
  return lib;
}

void openblas_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                    const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                    int64_t ldc) {
  const OpenBlas& lib = openblas();
  STRATA_CHECK(lib.sgemm != nullptr, "gemm: ", lib.why_not);
  constexpr int64_t kMax = std::numeric_limits<int>::max();
  STRATA_CHECK(m <= kMax && n <= kMax && k <= kMax && lda <= kMax && ldb <= kMax && ldc <= kMax,
               "gemm: OpenBLAS takes 32-bit sizes (m=", m, " n=", n, " k=", k, ")");
  lib.sgemm(101, trans_a ? 112 : 111, trans_b ? 112 : 111, static_cast<int>(m), static_cast<int>(n),
            static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta, c,
            static_cast<int>(ldc));
}

}  // namespace strata::kernels::detail
