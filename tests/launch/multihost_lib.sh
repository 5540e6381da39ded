# Sourced by the tests on emulated hosts (test_multihost.sh, test_multihost_degraded.sh,
# test_slurm_hosts.sh) after they set `src` (the source directory) and `work` where said: the
# skip rule, the host set's id, its bring-up, and the figures of a fault.
hosts="$src/scripts/emulated_hosts.sh"

# Exit 77 (ctest's skip) with the reason; under CI a missing prerequisite is a failure.
skip() {
  if [ -n "${CI:-}" ]; then echo "FAILED (CI is set, so this is not a skip): $1"; exit 1; fi
  echo "SKIP: $1"
  exit 77
}
fail() { echo "FAILED: $1"; exit 1; }
require_root() { [ "$(id -u)" = 0 ] || skip "needs root ($1)"; }

# The id of this test's host set (its namespaces, bridge and subnet 10.77.ID): from the process
# id, so that two tests running at once (ctest -j) use different sets.
id=$(( $$ % 150 + 40 ))

# hosts_up N: the set of N hosts, made afresh (a set an earlier run left is removed first);
# skips when this machine cannot make network namespaces.
hosts_up() {
  "$hosts" down "$id"
  "$hosts" up "$id" "$1" && return 0
  "$hosts" down "$id"
  [ -n "${work:-}" ] && rm -rf "$work"
  skip "cannot make network namespaces here"
}

# The last step in run NAME's metrics ($work/NAME/metrics.jsonl; 0 before the first).
step_of() {
  python3 -c "import json,sys; print(max([json.loads(l)['step'] for l in open(sys.argv[1]) if '\"loss\"' in l] or [0]))" \
    "$work/$1/metrics.jsonl" 2>/dev/null || echo 0
}
wait_step() { for _ in $(seq 1 1200); do [ "$(step_of "$1")" -ge "$2" ] && break; sleep 0.1; done; }

# One fault's figures: when it struck, how long until the launcher saw it, how long the restarted
# job took to finish, and the steps lost (the fault's step minus the resumed checkpoint's).
report() {  # WHAT STEP T_FAULT T_DETECTED T_DONE LOG
  python3 - "$@" <<'PY'
import re, sys
what, at, t0, t1, t2, log = sys.argv[1], int(sys.argv[2]), *map(float, sys.argv[3:6]), sys.argv[6]
m = re.findall(r"resumed from .* at step (\d+)", open(log).read())
assert m, "no resumed run in " + log
print(f"{what} at step {at}: detected in {t1 - t0:.1f} s, the restarted job done {t2 - t1:.1f} s "
      f"later; resumed from step {m[-1]}, {at - int(m[-1])} steps lost, none committed")
PY
}
