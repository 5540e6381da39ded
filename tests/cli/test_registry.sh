#!/usr/bin/env bash
# The model registry end to end: a 2-step run with [post_train] registers its final checkpoint
# and evaluates it (strata generate on the registered copy); a resumed run registers the next
# version with the first as its parent; list, show, pull, diff and verify work on them, and
# damaged files and bad requests get clear errors. Usage: test_registry.sh STRATA_BINARY SOURCE_DIR
set -uo pipefail
strata=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passed=0
failed=0
reg="$work/registry"

ok() { passed=$((passed + 1)); }
bad() { failed=$((failed + 1)); echo "FAILED: $*"; }
# expect_fail "pattern" args...: non-zero exit and the pattern in the output.
expect_fail() {
  local pattern=$1
  shift
  local out
  out=$("$strata" "$@" 2>&1)
  local rc=$?
  if [ $rc -ne 0 ] && grep -q -- "$pattern" <<<"$out"; then ok; else
    bad "strata $* (exit $rc), expected /$pattern/ in:"
    echo "$out" | tail -5
  fi
}
run() {  # run "description" command...: must exit 0; output kept in $out
  local what=$1
  shift
  out=$("$@" 2>&1)
  local rc=$?
  if [ $rc -eq 0 ]; then ok; else
    bad "$what (exit $rc):"
    echo "$out" | tail -8
  fi
}

"$strata" prepare --text "$src/tests/fixtures/kjv_excerpt.txt" --out "$work/data" --vocab 300 \
  >/dev/null 2>&1 || bad "prepare"
cat >"$work/run.toml" <<EOF
[model]
family = "gpt2"
n_layer = 1
n_head = 2
d_model = 32
vocab_size = 300
max_seq_len = 32

[train]
steps = 2
batch_size = 2
seq_len = 32
eval_every = 0
eval_batches = 1

[data]
source = "shards"
dir = "$work/data"

[run]
dir = "$work/run"

[sample]
max_new_tokens = 0

[post_train]
register = true
name = "kjv-tiny"
registry = "$reg"
eval_command = "'$strata' generate {checkpoint} --prompt 'And God' --max-new-tokens 4 --seed 1"
EOF

# 1. Train 2 steps: registered as kjv-tiny:v1 and evaluated on the registered copy.
run "train with [post_train]" "$strata" train "$work/run.toml"
grep -q "registered kjv-tiny:v1" <<<"$out" && ok || bad "train says it registered kjv-tiny:v1"
run "registry list" "$strata" registry list --registry "$reg"
grep -qE "^kjv-tiny +v1 " <<<"$out" && ok || { bad "list shows kjv-tiny v1"; echo "$out"; }
"$strata" registry show kjv-tiny:v1 --json --registry "$reg" >"$work/v1.json" || bad "show --json"
python3 - "$work/v1.json" "$work/run" "$reg" <<'PY' && ok || bad "show v1: step, metrics, lineage, eval"
import json, sys, os
v = json.load(open(sys.argv[1])); run = sys.argv[2]; reg = sys.argv[3]
assert v["ref"] == "kjv-tiny:v1" and v["step"] == 2 and v["parent"] is None, v["ref"]
assert v["val_loss"] is not None and v["metrics"]["step"] == 2, v["metrics"]
last = [json.loads(l) for l in open(run + "/metrics.jsonl")][-1]
assert v["metrics"]["loss"] == last["loss"], (v["metrics"], last)
assert v["config"]["train"]["steps"] == 2 and v["config"]["post_train"]["name"] == "kjv-tiny"
assert v["lineage"]["data"]["source"] == "shards" and v["lineage"]["tokenizer_xxh64"]
assert v["lineage"]["data_position"], v["lineage"]
assert v["blob"].startswith(os.path.realpath(reg)) and os.path.exists(v["blob"] + "/state.json")
assert len(v["content_hash"]) == 32
(e,) = v["evals"]
assert e["exit_status"] == 0 and e["output"].startswith("And God"), e
assert v["blob"] in e["command"], e["command"]  # {checkpoint}: the registered copy
PY
grep -q "exit 0" "$work/run/post_train_eval.log" && ok || bad "post_train_eval.log"

# 2. Resume to 4 steps: v2, whose parent (found from the resumed checkpoint) is v1.
run "resume with [post_train]" "$strata" train "$work/run.toml" --set train.steps=4
"$strata" registry show kjv-tiny --json --registry "$reg" >"$work/v2.json" || bad "show latest"
python3 - "$work/v2.json" <<'PY' && ok || bad "v2 has parent v1"
import json, sys
v = json.load(open(sys.argv[1]))
assert v["ref"] == "kjv-tiny:v2" and v["step"] == 4, v["ref"]
assert v["parent"]["ref"] == "kjv-tiny:v1" and "resumed" in v["parent"]["reason"], v["parent"]
assert v["lineage"]["ancestors"], v["lineage"]
PY
run "registry diff" "$strata" registry diff kjv-tiny:v1 kjv-tiny:v2 --registry "$reg"
grep -q "train.steps: 2 -> 4" <<<"$out" && grep -q "kjv-tiny:v2 descends from kjv-tiny:v1" <<<"$out" \
  && grep -qE "^  loss: .* \((\+|-)" <<<"$out" && ok || { bad "diff: config, relation, metric delta"; echo "$out"; }
"$strata" registry diff kjv-tiny:v1 kjv-tiny:v2 --json --registry "$reg" | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert any(c["key"] == "train.steps" and (c["a"], c["b"]) == (2, 4) for c in d["config"])
assert any(m["key"] == "val_loss" and "delta" in m for m in d["metrics"]), d["metrics"]
' && ok || bad "diff --json"

# 3. Pull v1 out (verified) and sample from the copy; push by hand under another name.
run "registry pull" "$strata" registry pull kjv-tiny:v1 --out "$work/pulled" --registry "$reg"
run "generate from the pulled copy" "$strata" generate "$work/pulled" --prompt "And" --max-new-tokens 3
cmp -s "$work/pulled/state.json" "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["blob"])' "$work/v1.json")/state.json" \
  && ok || bad "pulled state.json equals the registered one"
run "registry push by hand" "$strata" registry push "$work/pulled" --name kjv-copy --parent kjv-tiny:v1 \
  --registry "$reg"
grep -q "registered kjv-copy:v1" <<<"$out" && ok || bad "push by hand: $out"
run "push again" "$strata" registry push "$work/pulled" --name kjv-copy --registry "$reg"
grep -q "already registered: kjv-copy:v1" <<<"$out" && ok || bad "same content again: $out"
STRATA_REGISTRY="$reg" "$strata" registry list kjv-copy | grep -q "kjv-tiny:v1" && ok \
  || bad "STRATA_REGISTRY and the explicit parent"

# 4. Bad requests and damaged files.
expect_fail "no model named 'nope'" registry show nope --registry "$reg"
expect_fail "has no version 7" registry show kjv-tiny:v7 --registry "$reg"
expect_fail "not an empty directory" registry pull kjv-tiny:v1 --out "$work/pulled" --registry "$reg"
expect_fail "is not a checkpoint" registry push "$work/data" --name x --registry "$reg"
expect_fail "model name 'a/b' is not valid" registry push "$work/run" --name a/b --registry "$reg"
expect_fail "no model registry" registry list --registry "$work/none"
printf '[post_train]\nregister = true\nname = "bad name"\n' >"$work/badname.toml"
expect_fail "post_train.name" train "$work/badname.toml"
printf '[post_train]\nregistr = true\n' >"$work/typo.toml"
expect_fail "did you mean 'post_train.register'" train "$work/typo.toml"
run "verify" "$strata" registry verify kjv-copy:v1 --registry "$reg"
blob=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["blob"])' "$work/v1.json")
printf 'X' | dd of="$blob/rank_00000.safetensors" bs=1 seek=200 conv=notrunc 2>/dev/null
expect_fail "rank_00000.safetensors.*damaged" registry verify kjv-tiny:v1 --registry "$reg"
expect_fail "damaged" registry pull kjv-tiny:v1 --out "$work/pulled2" --registry "$reg"
[ ! -e "$work/pulled2" ] && ok || bad "a failed pull leaves nothing at --out"

# 5. An evaluation that fails is recorded and reported, and does not fail the run.
run "failing eval" "$strata" train "$work/run.toml" --set run.dir="$work/run_eval" \
  --set data.source=synthetic --set train.steps=1 --set post_train.register=false \
  --set "post_train.eval_command=echo evaluating {checkpoint}; exit 3"
grep -q "exited with status 3" <<<"$out" && grep -q "\[exit 3" "$work/run_eval/post_train_eval.log" \
  && grep -q "evaluating .*run_eval/ckpt/step_00000001" "$work/run_eval/post_train_eval.log" \
  && ok || bad "failing eval recorded: $(cat "$work/run_eval/post_train_eval.log")"

echo "registry: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
