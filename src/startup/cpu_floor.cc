// The CPU floor check: the first code of every strata executable, compiled for the generic x86-64
// (no AVX) so that it runs on any x86-64 CPU, and it runs before every other initialiser of the
// program (constructor priority 101) because the rest of the program is compiled for x86-64-v3
// (AVX2, FMA, BMI2, F16C, MOVBE) and may use those instructions anywhere, static initialisers
// included. Below the floor it prints one line and exits with status 1 instead of dying of SIGILL.
// aarch64's floor is the architecture's baseline (NEON is part of armv8-a): nothing to check.
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace {

#if defined(__x86_64__)
__attribute__((constructor(101))) void strata_check_cpu_floor() {
  __builtin_cpu_init();
  // x86-64-v3, plus AES and PCLMUL, which Highway's AVX2 level assumes (every AVX2 CPU has them).
#if defined(__clang__)
  // clang 14 (the ThreadSanitizer build) knows neither the level's name nor F16C, LZCNT and
  // MOVBE: it checks the level's features it can name (every CPU with them has the other three).
  const bool v3 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                  __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2") &&
                  __builtin_cpu_supports("popcnt") && __builtin_cpu_supports("sse4.2");
#else
  const bool v3 = __builtin_cpu_supports("x86-64-v3");
#endif
  if (v3 && __builtin_cpu_supports("aes") && __builtin_cpu_supports("pclmul")) return;
  const char* msg =
      "strata: this CPU lacks AVX2 + FMA (x86-64-v3), the least strata's kernels need; run on an "
      "x86-64 CPU from 2013 on (Intel Haswell, AMD Zen or later) or on aarch64\n";
  // write(2), not stdio: nothing else of the program has been initialised yet.
  const ssize_t written = write(STDERR_FILENO, msg, std::strlen(msg));
  (void)written;
  _exit(1);
}
#endif

}  // namespace
