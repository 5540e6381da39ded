#!/usr/bin/env bash
# Three emulated hosts (scripts/emulated_hosts.sh), two ranks each (tp 2 inside a host, dp 3
# across them), and the faults that need a third host to be told apart (GitHub issue 23):
#  1. A slow link: host 2's link shaped (tc tbf on both ends of its veth: 10 Mbit/s and drops
#     beyond 100 ms of queue; the kernel here has no netem) from step 12 until found. The world's
#     communication wait jumps, the link probe names ranks 2 and 3 on host 2 while their compute
#     stays at the median, `strata diagnose` says it is the network, not compute, and the run ends
#     with the parameters of the fault-free run, bit for bit.
#  2. A host that does not come back: every process of host 3 SIGKILLed after the checkpoint of
#     step 10 and its link left down. `strata launch --elastic` restarts, cannot start host 3
#     (the agent answers as ssh does), drops it from the hostfile and goes on on hosts 1 and 2
#     with dp 2 and train.grad_accum 3, which keeps the global batch of 12 sequences (the
#     checkpoint resharded on load); the final parameters match the fault-free run within f32
#     tolerance.
#  3. The same host down for 10 s without --elastic: the restarts back off until it is back.
# Each prints its time to detect, to recover, and the steps lost. Nothing is left behind.
#
#   test_multihost_degraded.sh STRATA SOURCE_DIR   (exit 77 without root or network namespaces,
#   outside CI; under CI that is a failure)
set -uo pipefail
strata=$1 src=$2
source "$src/tests/launch/multihost_lib.sh"
require_root "ip netns"
hosts_up 3
work=$(mktemp -d "${TMPDIR:-/tmp}/strata_degraded.XXXXXX")
trap '"$hosts" down "$id"; rm -rf "$work"' EXIT
"$hosts" hostfile "$id" 2 > "$work/hostfile"
net="10.77.$id"
echo "hosts: $(tr '\n' ' ' < "$work/hostfile")"
eval "$("$hosts" env "$id")"
export OMP_NUM_THREADS=1
args=(--set data.source=synthetic --set train.steps=30 --set train.eval_every=0
      --set train.eval_batches=1 --set train.checkpoint_every=10 --set run.resume=auto
      --set sample.max_new_tokens=0 --set parallel.tp=2 --set model.n_layer=2
      --set train.batch_size=2 --set train.grad_accum=2 --set train.seq_len=64
      --set system.threads=1 --set train.log_every=1)
run() {  # NAME [launch options...]: a job across the hosts, in the background ($job)
  local name=$1
  shift
  timeout --kill-after=10 600 "$strata" launch -n 6 --hostfile "$work/hostfile" "$@" -- \
    "$src/configs/tiny.toml" "${args[@]}" --set "run.dir=$work/$name" > "$work/$name.log" 2>&1 &
  job=$!
}
shape() {  # add|del: host 2's link, both directions
  local how=(root tbf rate 10mbit burst 32kb latency 100ms)
  [ "$1" = del ] && how=(root)
  tc qdisc "$1" dev "sv$id-2" "${how[@]}" && "$hosts" exec "$id" 2 tc qdisc "$1" dev eth0 "${how[@]}"
}

run clean
wait "$job" || { tail -30 "$work/clean.log"; fail "the fault-free run failed"; }
echo "fault-free run: 30 steps on 3 hosts"

# 1. A slow link.
run slow
wait_step slow 12
at=$(step_of slow)
t0=$(date +%s.%N)
shape add || fail "cannot shape host 2's link (tc tbf)"
for _ in $(seq 1 1200); do grep -q "slow link:" "$work/slow.log" && break; sleep 0.1; done
t1=$(date +%s.%N)
shape del
wait "$job" || { tail -30 "$work/slow.log"; fail "the slow-link run failed"; }
t2=$(date +%s.%N)
grep -q "slow link:" "$work/slow.log" || { tail -30 "$work/slow.log"; fail "no slow link found"; }
grep "slow link:" "$work/slow.log" | head -1 | cut -c1-400 | sed 's/^/    /'
grep "slow link:" "$work/slow.log" | head -1 | grep -q "rank(s) \[2,3\] on host(s) \[\"strata-$id-h2\"\]" ||
  fail "the slow link was not pinned on ranks 2 and 3 of strata-$id-h2"
"$strata" diagnose "$work/slow" > "$work/diagnose.txt" 2>&1
grep -q "host strata-$id-h2 (rank(s) 2, 3" "$work/diagnose.txt" &&
  grep -q "the network, not compute" "$work/diagnose.txt" ||
  { cat "$work/diagnose.txt"; fail "strata diagnose does not blame host 2's link"; }
grep -A1 "slow_link" "$work/diagnose.txt" | head -2 | cut -c1-300 | sed 's/^/    /'
python3 - "$at" "$t0" "$t1" "$t2" <<'PY'
import sys
at, t0, t1, t2 = int(sys.argv[1]), *map(float, sys.argv[2:])
print(f"slow link on host 2 from step {at}: named in {t1 - t0:.1f} s; unshaped then, the run done "
      f"{t2 - t1:.1f} s later; no restart, 0 steps lost")
PY
python3 "$src/tests/tools/same_checkpoint.py" "$work/clean" "$work/slow" 30 ||
  fail "the slow link changed the parameters"

# 2. A host that does not come back, under --elastic.
run elastic --elastic --max-restarts 2 --startup-timeout 60
wait_step elastic 13
at=$(step_of elastic)
t0=$(date +%s.%N)
ip link set "sv$id-3" down
for pid in $(ip netns pids "strata-$id-h3"); do kill -9 "$pid" 2>/dev/null || true; done
for _ in $(seq 1 1200); do grep -q "elastic: host" "$work/elastic.log" && break; sleep 0.1; done
t1=$(date +%s.%N)
wait "$job" || { tail -40 "$work/elastic.log"; fail "the elastic run failed"; }
t2=$(date +%s.%N)
grep -E "strata launch: (.*exited|elastic|restarting)" "$work/elastic.log" | cut -c1-260 | sed 's/^/    /'
grep -q "elastic: host $net.13 cannot be brought back; restarting on 4 ranks of the 2 host(s)" \
  "$work/elastic.log" || fail "the elastic restart did not drop host 3"
report "host 3 lost for good (dropped from the hostfile, on 2 hosts after)" "$at" "$t0" "$t1" "$t2" \
  "$work/elastic.log"
for r in clean elastic; do
  "$strata" export "$work/$r" --hf "$work/$r.hf" --no-tokenizer > /dev/null ||
    fail "cannot export $r's final checkpoint"
done
python3 "$src/tests/tools/close_export.py" "$work/clean.hf" "$work/elastic.hf" 1e-5 1e-3 ||
  fail "the elastic run's parameters are not those of the fault-free run"
ip link set "sv$id-3" up  # host 3 is back for the next case
# 3. A host down for a while, without --elastic: every process of host 3 SIGKILLed and its link
#    down for 10 s. Each restart that finds it down waits twice as long as the one before, so
#    the job starts again once the host is back, on all 3 hosts, and ends bitwise as the
#    fault-free run.
run back --max-restarts 6 --startup-timeout 60
wait_step back 13
at=$(step_of back)
t0=$(date +%s.%N)
ip link set "sv$id-3" down
for pid in $(ip netns pids "strata-$id-h3"); do kill -9 "$pid" 2>/dev/null || true; done
(sleep 10; ip link set "sv$id-3" up) &
back_link=$!
for _ in $(seq 1 1200); do grep -q "restarting in" "$work/back.log" && break; sleep 0.1; done
t1=$(date +%s.%N)
wait "$back_link"
wait "$job" || { tail -40 "$work/back.log"; fail "the run with a host down for 10 s failed"; }
t2=$(date +%s.%N)
grep -E "strata launch: .*(exited|restarting in)" "$work/back.log" | cut -c1-220 | sed 's/^/    /'
grep -q "waiting for host $net.13 to come back" "$work/back.log" ||
  fail "the restarts did not wait for host 3"
report "host 3 down for 10 s (back on all 3 hosts after)" "$at" "$t0" "$t1" "$t2" "$work/back.log"
python3 "$src/tests/tools/same_checkpoint.py" "$work/clean" "$work/back" 30 ||
  fail "the run resumed after the host came back differs"
echo "multihost degraded: all checks passed"
