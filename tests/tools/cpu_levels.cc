// Prints the CPU kernel levels this machine runs, best first, one per line (kernels/cpu/isa.h):
// what tests/run_at_levels.sh runs each test suite at.
#include <cstdio>

#include "kernels/cpu/isa.h"

int main() {
  for (strata::kernels::isa::Level level : strata::kernels::isa::supported())
    std::printf("%s\n", strata::kernels::isa::name(level));
  return 0;
}
