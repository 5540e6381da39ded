#!/usr/bin/env bash
# The single-process unit tests under AddressSanitizer and UndefinedBehaviorSanitizer (a separate
# build in build-asan/). MPI jobs are left to the main suite: Open MPI's own allocations make
# ASan's leak checker noisy without telling us anything about strata.
set -euo pipefail
cd "$(dirname "$0")/.."
# -O1 -g1 (CMakeLists.txt turns the layers' -O3 into -O1 under STRATA_SANITIZE): line tables
# only, which is all ASan's and UBSan's reports print (file:line per frame); full -g made the ASan
# compile of trainer.cc take 64 s instead of 46 s at -O3. -O1 halves the build (the longest step
# of CI at -O3), for suites that run a little slower.
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTRATA_SANITIZE=ON \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" \
  >/dev/null
targets=(strata_test_core strata_test_kernels strata_test_model strata_test_optim strata_test_data
         strata_test_io strata_test_run strata_test_train)
existing=()
for t in "${targets[@]}"; do
  [ -n "$(find tests/"${t#strata_test_}" -name '*.cc' 2>/dev/null | head -n 1)" ] && existing+=("$t")
done
cmake --build build-asan -j"$(nproc)" --target "${existing[@]}"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export OMP_NUM_THREADS=2
for t in "${existing[@]}"; do
  echo "== $t (ASan + UBSan)"
  ./build-asan/tests/"$t" --gtest_brief=1
done
