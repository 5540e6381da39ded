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

# A damaged shard of a prepared folder is named by the manifest check before any step runs.
cp -r "$work/data" "$work/data_bad"
printf '\x07' | dd of="$work/data_bad/train_000.bin" bs=1 seek=2000 conv=notrunc status=none
expect_fail "train_000.bin: XXH3" train "$src/configs/tiny.toml" "${common[@]}" \
  --set data.dir="$work/data_bad" --set run.dir="$work/run_bad2" --set train.steps=1

# JSON Lines, compressed, with the text in a nested field; a bad record is named with its file
# and line, and tolerated only below --max-bad-fraction.
python3 - "$src/tests/fixtures/kjv_excerpt.txt" "$work/kjv.jsonl" <<'PY'
import json, sys
docs = [d for d in open(sys.argv[1], encoding="utf-8").read().split("\n\n") if d.strip()]
with open(sys.argv[2], "w", encoding="utf-8") as f:
    for i, d in enumerate(docs):
        f.write(json.dumps({"id": i, "meta": {"body": d}}) + "\n")
        if i == 3:
            f.write('{"id": "broken", "meta": {"body": \n')
PY
gzip -k "$work/kjv.jsonl"
expect_fail "kjv.jsonl.gz:5: malformed JSON" prepare --input "$work/kjv.jsonl.gz" --field meta.body \
  --out "$work/data_jsonl" --vocab 300
expect_ok prepare --input "$work/kjv.jsonl.gz" --field meta.body --max-bad-fraction 0.01 \
  --out "$work/data_jsonl" --vocab 300
if grep -q '"bad_records": 1' "$work/data_jsonl/prepare_report.json" && [ -f "$work/data_jsonl/manifest.json" ]; then
  passed=$((passed + 1))
else
  failed=$((failed + 1)); echo "FAILED: the JSON Lines prepare reports one bad record and writes a manifest"
fi
expect_fail "no field 'text'" prepare --input "$work/kjv.jsonl.gz" --out "$work/data_nofield" --vocab 300
expect_fail "--format" prepare --input "$work/kjv.jsonl.gz" --format csv --out "$work/data_fmt"
# An existing tokenizer: the same shards as the prepare that trained it.
expect_ok prepare --input "$work/kjv.jsonl.gz" --field meta.body --max-bad-fraction 0.01 \
  --tokenizer "$work/data_jsonl/tokenizer.json" --out "$work/data_tok"
if cmp -s "$work/data_jsonl/train_000.bin" "$work/data_tok/train_000.bin"; then
  passed=$((passed + 1))
else
  failed=$((failed + 1)); echo "FAILED: --tokenizer gives the shards of the prepare that trained it"
fi

# DeepSpeed JSON: the training keys map onto strata's (batch rule, clipping, optimizer, scheduler,
# logging); an unsupported or unknown key is named and the run does not start.
cat > "$work/ds.json" <<'JSON'
{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2, "gradient_clipping": 0.25,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.002, "betas": [0.9, 0.99], "weight_decay": 0.01}},
 "scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": 0.002, "warmup_num_steps": 0}},
 "bf16": {"enabled": false}, "zero_optimization": {"stage": 0, "contiguous_gradients": true},
 "steps_per_print": 1, "wall_clock_breakdown": false}
JSON
ds_sets=(--set model.n_layer=1 --set model.d_model=32 --set model.n_head=2 --set model.vocab_size=300
  --set model.max_seq_len=32 --set train.seq_len=32 --set train.steps=2 --set train.eval_every=0
  --set train.eval_batches=1 --set data.source=synthetic --set sample.max_new_tokens=0
  --set run.dir="$work/run_ds")
expect_ok train "$src/configs/tiny.toml" --deepspeed "$work/ds.json" "${ds_sets[@]}"
# train_batch_size 4 = micro-batch 2 x accumulation 2 x 1 rank; WarmupLR with no warmup: lr 0.002.
if python3 - "$work/run_ds" <<'PY'
import json, sys
run = sys.argv[1]
c = json.load(open(run + "/config.json"))
lines = [json.loads(l) for l in open(run + "/metrics.jsonl")]
assert (c["train"]["batch_size"], c["train"]["grad_accum"]) == (2, 2), c["train"]
assert c["optim"]["grad_clip"] == 0.25 and c["optim"]["decay"] == "constant", c["optim"]
assert c["optim"]["beta2"] == 0.99 and c["optim"]["weight_decay"] == 0.01, c["optim"]
assert c["train"]["log_every"] == 1 and c["train"]["precision"] == "f32", c["train"]
assert [l["step"] for l in lines] == [1, 2] and all(abs(l["lr"] - 0.002) < 1e-9 for l in lines)
PY
then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED: DeepSpeed keys mapped"; fi
printf '{"train_batch_size": 4, "optimizer": {"type": "Lamb"}, "fooo": 1}\n' > "$work/ds_bad.json"
expect_fail "optimizer.type: 'Lamb' is not supported" train "$src/configs/tiny.toml" \
  --deepspeed "$work/ds_bad.json" "${ds_sets[@]}"
expect_fail "unknown top-level key 'fooo'" train "$src/configs/tiny.toml" \
  --deepspeed "$work/ds_bad.json" "${ds_sets[@]}"
printf '{"train_batch_size": 5, "train_micro_batch_size_per_gpu": 2}\n' > "$work/ds_batch.json"
expect_fail "train_batch_size 5 is not a multiple" train "$src/configs/tiny.toml" \
  --deepspeed "$work/ds_batch.json" "${ds_sets[@]}"
# strata launch passes --deepspeed on to the ranks (and checks the file once, before starting).
if "$strata" launch -n 2 --dry-run -- "$src/configs/tiny.toml" --deepspeed "$work/ds.json" \
  "${ds_sets[@]}" 2>&1 | grep -q -- "--deepspeed"; then
  passed=$((passed + 1))
else
  failed=$((failed + 1)); echo "FAILED: strata launch forwards --deepspeed"
fi
expect_fail "optimizer.type" launch -n 2 --dry-run -- "$src/configs/tiny.toml" \
  --deepspeed "$work/ds_bad.json" "${ds_sets[@]}"

# [profile]: a 2-rank pipeline (pp 2) traced over steps 2-3: one Chrome-trace file per rank and
# the merged trace.json, with layer forward/backward, collectives (bytes, group), optimizer, data
# and pipeline spans; every metrics line has the time split and the communication share.
prof_sets=(--set model.n_layer=2 --set model.d_model=32 --set model.n_head=2 --set model.vocab_size=300
  --set model.max_seq_len=32 --set train.seq_len=32 --set train.batch_size=2 --set train.steps=4
  --set train.grad_accum=2 --set train.eval_every=0 --set train.eval_batches=1 --set parallel.pp=2
  --set data.source=synthetic --set sample.max_new_tokens=0 --set run.dir="$work/run_prof"
  --set profile.enabled=true --set profile.start_step=2 --set profile.steps=2)
if out=$(OMP_NUM_THREADS=1 mpirun -np 2 --allow-run-as-root --oversubscribe --mca btl self,vader \
  "$strata" train "$src/configs/tiny.toml" "${prof_sets[@]}" 2>&1) && python3 - "$work/run_prof" <<'PY'
import json, sys
run = sys.argv[1]
for r in (0, 1):
    json.load(open(f"{run}/trace/rank_{r}.json"))
t = json.load(open(f"{run}/trace/trace.json"))
x = [e for e in t["traceEvents"] if e["ph"] == "X"]
names = {(e["pid"], e["name"]) for e in x}
assert {e["pid"] for e in x} == {0, 1}, "events of both ranks"
for rank, layer in ((0, 0), (1, 1)):  # stage 0 holds layer 0, stage 1 layer 1
    for what in ("fwd layer", "bwd layer"):
        assert (rank, f"{what} {layer}") in names, (rank, what, layer)
for rank in (0, 1):
    for name in ("step 2", "step 3", "optimizer", "data", "pipeline forward", "pipeline backward"):
        assert (rank, name) in names, (rank, name)
assert ("step 4" not in {n for _, n in names}) and ("step 1" not in {n for _, n in names})
comm = [e for e in x if e["cat"] == "comm"]
assert {e["name"] for e in comm} >= {"send", "recv", "all_reduce"}, {e["name"] for e in comm}
assert all(e["args"]["bytes"] >= 0 and e["args"]["group"] for e in comm)
assert any(e["name"] == "send" and e["args"]["group"] == "pp" and e["args"]["bytes"] > 0 for e in comm)
assert any(e["cat"] == "pipeline" and e["name"].startswith("pipeline wait") for e in x)
for line in open(f"{run}/metrics.jsonl"):
    m = json.loads(line)
    assert 0 <= m["comm_share"] <= 1 and m["time"]["bubble_s"] >= 0, m
    assert all(k in m["time"] for k in ("data_s", "compute_s", "comm_exposed_s", "other_s"))
PY
then
  passed=$((passed + 1))
else
  failed=$((failed + 1)); echo "FAILED: [profile] traces a 2-rank pipeline"; echo "$out" | tail -5
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
