#!/usr/bin/env bash
# The command line's contract: bad input gets one clear message and a non-zero exit; the main
# subcommands work end to end on a tiny run. Usage: test_cli.sh STRATA_BINARY SOURCE_DIR
set -uo pipefail
strata=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passed=0
failed=0

# expect_fail "pattern" args...: the command must exit non-zero and print pattern on stderr.
expect_fail() {
  local pattern=$1
  shift
  local out
  out=$("$strata" "$@" 2>&1)
  local rc=$?
  if [ $rc -ne 0 ] && grep -q -- "$pattern" <<<"$out"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAILED: strata $* (exit $rc), expected /$pattern/ in:"
    echo "$out" | tail -5
  fi
}
expect_ok() {
  local out
  out=$("$strata" "$@" 2>&1)
  local rc=$?
  if [ $rc -eq 0 ]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAILED: strata $* (exit $rc):"
    echo "$out" | tail -8
  fi
}

expect_ok --help
"$strata" --help | grep -q train && "$strata" --help | grep -q prepare && "$strata" --help | grep -q generate \
  && passed=$((passed + 1)) || { failed=$((failed + 1)); echo "FAILED: --help lists subcommands"; }

expect_fail "missing.toml" train "$work/missing.toml"
printf '[train]\nstpes = 5\n' > "$work/typo.toml"
expect_fail "did you mean 'train.steps'" train "$work/typo.toml"
printf '[model]\nn_head = 3\n' > "$work/heads.toml"
expect_fail "model.n_head" train "$work/heads.toml"
printf '[train]\nsteps = "ten"\n' > "$work/type.toml"
expect_fail "train.steps" train "$work/type.toml"
printf '[train\nsteps = 1\n' > "$work/syntax.toml"
expect_fail "syntax.toml:" train "$work/syntax.toml"
expect_fail "train.steps" train "$src/configs/tiny.toml" --set train.steps=-1
expect_fail "nothing" train "$src/configs/tiny.toml" --set data.source=shards --set data.dir="$work/nothing"
expect_fail "not a checkpoint" generate "$work"
expect_fail "nope.txt" prepare --text "$work/nope.txt" --out "$work/d"

# A bad shard: wrong magic.
mkdir -p "$work/bad"
head -c 2048 /dev/urandom > "$work/bad/train_000.bin"
expect_fail "train_000.bin" train "$src/configs/tiny.toml" --set data.source=shards --set data.dir="$work/bad" \
  --set run.dir="$work/run_bad"

# End to end: prepare, train a few steps, resume, generate.
expect_ok prepare --text "$src/tests/fixtures/kjv_excerpt.txt" --out "$work/data" --vocab 300
common=(--set model.n_layer=1 --set model.d_model=32 --set model.n_head=2 --set model.vocab_size=300
  --set train.batch_size=2 --set train.seq_len=32 --set model.max_seq_len=32 --set train.eval_every=2
  --set train.eval_batches=1 --set data.source=shards --set data.dir="$work/data" --set run.dir="$work/run"
  --set sample.max_new_tokens=5)
expect_ok train "$src/configs/tiny.toml" "${common[@]}" --set train.steps=3
expect_ok train "$src/configs/tiny.toml" "${common[@]}" --set train.steps=5
if [ "$(wc -l < "$work/run/metrics.jsonl")" -eq 5 ] && grep -q "resumed from" "$work/run/train.log"; then
  passed=$((passed + 1))
else
  failed=$((failed + 1)); echo "FAILED: resume appended steps 4-5 to metrics.jsonl"
fi
expect_ok generate "$work/run/ckpt/latest" --prompt "And God" --max-new-tokens 8

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
