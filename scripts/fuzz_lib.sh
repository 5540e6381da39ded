# Sourced by scripts/test_fuzz.sh (CI) and bench/fuzz.sh: the libFuzzer targets of tests/fuzz,
# their clang build (STRATA_FUZZ: ASan + UBSan + coverage) and one run of one target.
# Run from the repository root.

# One per reader of outside input (tests/fuzz/fuzz_<name>.cc; seeds in tests/fuzz/<name>/).
FUZZ_TARGETS=(safetensors safetensors_index tokenizer shard config deepspeed checkpoint_index
              checkpoint_state hf_config)
FUZZ_BUILD=${FUZZ_BUILD:-build-fuzz}

fuzz_dict() {
  case "$1" in
    shard) ;;  # binary: no dictionary
    config) echo "-dict=tests/fuzz/toml.dict" ;;
    *) echo "-dict=tests/fuzz/json.dict" ;;
  esac
}

# Configures (clang-14, Ninja) and builds every target; the libraries the readers are in at -O1,
# the others only linked, at -O0 (src/CMakeLists.txt).
fuzz_build() {
  if ! command -v clang++-14 >/dev/null; then
    echo "fuzz: clang++-14 not found (Debian: apt-get install clang-14 libclang-rt-14-dev)" >&2
    return 1
  fi
  CC=clang-14 CXX=clang++-14 cmake -S . -B "$FUZZ_BUILD" -G Ninja -DSTRATA_FUZZ=ON \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1" >/dev/null
  cmake --build "$FUZZ_BUILD" -j"${FUZZ_JOBS:-$(nproc)}" --target "${FUZZ_TARGETS[@]/#/fuzz_}"
}

# fuzz_run NAME SECONDS WORK_DIR [libFuzzer flags...]: fuzzes one target for SECONDS over its seed
# corpus, writing new inputs to WORK_DIR/corpus (the repository's corpus is only read) and any
# finding to WORK_DIR/ (crash-*, leak-*, timeout-*, oom-*); libFuzzer's log to WORK_DIR/log.
# Returns libFuzzer's status (0: nothing found).
# Limits: 10 s per input (a hang), 2 GiB resident, and 512 MiB for one allocation (a reader
# sizing memory from a count it read: inputs are a few KB).
fuzz_run() {
  local name=$1 seconds=$2 work=$3
  shift 3
  mkdir -p "$work/corpus"
  # shellcheck disable=SC2046
  ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=0 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 OMP_NUM_THREADS=1 \
    "$FUZZ_BUILD/tests/fuzz/fuzz_$name" -max_total_time="$seconds" -timeout=10 \
    -rss_limit_mb=2048 -malloc_limit_mb=512 -print_final_stats=1 $(fuzz_dict "$name") \
    -artifact_prefix="$work/" "$@" "$work/corpus" "tests/fuzz/$name" >"$work/log" 2>&1
}

# The last "cov: N ft: N corp: N/SIZE exec/s: N" figures of a run's log, and its totals.
fuzz_figures() {
  local log=$1
  local cov ft corp execs rate
  cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -n 1 | cut -d' ' -f2)
  ft=$(grep -oE 'ft: [0-9]+' "$log" | tail -n 1 | cut -d' ' -f2)
  corp=$(grep -oE 'corp: [0-9]+/[0-9a-zA-Z]+' "$log" | tail -n 1 | cut -d' ' -f2)
  execs=$(grep -oE 'stat::number_of_executed_units:[[:space:]]+[0-9]+' "$log" | tail -n 1 |
          awk '{print $2}')
  rate=$(grep -oE 'stat::average_exec_per_sec:[[:space:]]+[0-9]+' "$log" | tail -n 1 | awk '{print $2}')
  echo "${execs:-?} ${rate:-?} ${cov:-?} ${ft:-?} ${corp:-?}"
}
