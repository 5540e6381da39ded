#!/usr/bin/env bash
# `strata prepare` across threads and processes, killed and resumed: one output, byte for byte.
#   1. a reference run (one process, two threads);
#   2. one thread, and `mpirun -n 2` and `-n 3`, give the same files;
#   3. runs killed with SIGKILL at random moments (alternately one process and mpirun -n 2), each
#      resumed by the next, end with the same files, having reused what the killed ones finished.
# Usage: test_prepare_resume.sh STRATA_BINARY SOURCE_DIR [SEED]
set -uo pipefail
strata=$1
src=$2
seed=${3:-$RANDOM}
RANDOM=$seed
echo "seed $seed (rerun with it as the third argument to repeat the kill points)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passed=0
failed=0
check() {  # check "what" command...
  local what=$1
  shift
  if "$@"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAILED: $what"
  fi
}

# ~24 MB of JSON Lines in two files (words drawn from the KJV), with exact and near copies
# planted: 50 units at --range-bytes 512K.
python3 - "$src/tests/fixtures/kjv_excerpt.txt" "$work" <<'PY'
import json, random, sys
words = open(sys.argv[1]).read().split()
rng = random.Random(5)
docs = []
for part in range(2):
    with open(f"{sys.argv[2]}/part{part}.jsonl", "w") as f:
        for i in range(20000):
            if docs and i % 40 == 0:
                doc = rng.choice(docs).upper()  # an exact copy (case ignored)
            elif docs and i % 40 == 1:
                w = rng.choice(docs).split()  # a near copy: one word changed
                w[len(w) // 2] = "strata"
                doc = " ".join(w)
            else:
                doc = " ".join(rng.choice(words) for _ in range(rng.randint(60, 180)))
            docs.append(doc)
            f.write(json.dumps({"id": i, "text": doc}) + "\n")
PY
args=(prepare --input "$work/part*.jsonl" --vocab 2000 --dedup minhash --range-bytes 512K
  --max-shard-tokens 400000)
mpi=(mpirun --allow-run-as-root --oversubscribe)
# SIGKILL to every process whose command line mentions $1 (/proc: no procps needed).
kill_matching() {
  local p
  for p in /proc/[0-9]*; do
    if tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -qF -- "$1"; then
      kill -KILL "${p#/proc/}" 2>/dev/null
    fi
  done
}
digest() {  # every output file but the report (it holds times) and a half-removed work folder
  (cd "$1" && ls -A | grep -v -e '^prepare_report.json$' -e '^\.prepare\.removing\.' |
    xargs sha256sum | sha256sum)
}

OMP_NUM_THREADS=2 "$strata" "${args[@]}" --out "$work/ref" >"$work/ref.log" 2>&1 ||
  { echo "FAILED: the reference prepare"; tail -5 "$work/ref.log"; exit 1; }
ref=$(digest "$work/ref")
grep -q '"units": 50' "$work/ref/prepare_report.json" ||
  { echo "FAILED: expected 50 units"; head -5 "$work/ref/prepare_report.json"; }
check "the reference has several train shards" [ "$(ls "$work"/ref/train_*.bin | wc -l)" -gt 2 ]

OMP_NUM_THREADS=1 "$strata" "${args[@]}" --out "$work/t1" >/dev/null 2>&1
check "one thread gives the same files" [ "$(digest "$work/t1")" = "$ref" ]
for n in 2 3; do
  "${mpi[@]}" -n $n -x OMP_NUM_THREADS=1 "$strata" "${args[@]}" --out "$work/mpi$n" \
    >"$work/mpi$n.log" 2>&1
  check "mpirun -n $n gives the same files" [ "$(digest "$work/mpi$n")" = "$ref" ]
  check "mpirun -n $n: worker 1 reports its part" grep -q "prepare worker 1 of $n" "$work/mpi$n.log"
done

# Kill at random moments (0.1 to 0.55 s in, of a prepare of 2-4 s); every run resumes the one before,
# until one gets to the end.
out=$work/killed
reused=0
killed=0
for round in $(seq 1 16); do
  delay=$(printf '0.%02d' $((10 + RANDOM % 45)))
  if [ $((round % 2)) -eq 0 ]; then
    cmd=("${mpi[@]}" -n 2 -x OMP_NUM_THREADS=1 "$strata" "${args[@]}" --out "$out")
  else
    cmd=("$strata" "${args[@]}" --out "$out")
  fi
  setsid "${cmd[@]}" >"$work/kill$round.log" 2>&1 &
  pid=$!
  sleep "$delay"
  if ! kill -0 "$pid" 2>/dev/null; then  # it got to the end first
    wait "$pid"
    check "round $round finished on its own" [ $? -eq 0 ]
    grep -q "resuming from the records" "$work/kill$round.log" && reused=$((reused + 1))
    echo "round $round: finished within $delay s"
    break
  fi
  kill -KILL -- -"$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  kill_matching "$out"  # any rank mpirun left behind
  grep -q "resuming from the records" "$work/kill$round.log" && reused=$((reused + 1))
  if [ -e "$out/manifest.json" ] && [ ! -e "$out/.prepare" ]; then
    echo "round $round: finished, killed while it removed its work folder"
    break
  fi
  killed=$((killed + 1))
  echo "round $round: killed after $delay s" \
    "($(ls "$out/.prepare/scan" 2>/dev/null | grep -c '\.rec$') scans," \
    "$(ls "$out/.prepare/encode" 2>/dev/null | grep -c '\.rec$') encodings," \
    "$(ls "$out/.prepare/shards" 2>/dev/null | grep -c '\.rec$') shards done)"
done
check "at least three runs were killed midway ($killed)" [ "$killed" -ge 3 ]
[ -e "$out/.prepare" ] && "$strata" "${args[@]}" --out "$out" >"$work/final.log" 2>&1
check "the killed and resumed prepare finished" [ -e "$out/manifest.json" ]
check "the killed and resumed prepare gives the same files" [ "$(digest "$out")" = "$ref" ]
touch "$work/final.log"
reused=$((reused + $(grep -c 'resuming from the records' "$work/final.log")))
check "the resumed runs reused the killed runs' records ($reused said so)" [ "$reused" -gt 1 ]
check "no work folder is left" [ ! -e "$out/.prepare" ]

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
