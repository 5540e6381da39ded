#!/usr/bin/env bash
# `strata prepare` in bounded memory: JSON Lines (zstd) corpora of 0.1, 1 and 10 GB (uncompressed
# text), each prepared with a trained tokenizer, recording wall time, peak RSS (GNU time) and
# throughput. The corpus is one ~100 MB block of generated English-like documents (distinct
# documents, random words from the KJV excerpt's vocabulary), its zstd frames concatenated 10 and
# 100 times for the larger sizes: enough for memory (which must not grow with the corpus) and
# speed; not a dedup test.
#
#   bench/prepare_scale.sh [STRATA] [SIZES_GB...]   (default: build/strata 0.1 1 10)
# PREPARE_ARGS adds options to every prepare (for example PREPARE_ARGS="--dedup minhash": the
# larger corpora are then almost all copies of the first 100 MB, which the sorts must hold).
# Needs python3, zstd, /usr/bin/time; ~3 GB of disk under $TMPDIR for 10 GB of text.
set -euo pipefail
cd "$(dirname "$0")/.."
strata=${1:-build/strata}
shift || true
sizes=(0.1 1 10)
[ $# -gt 0 ] && sizes=("$@")
work=$(mktemp -d "${TMPDIR:-/tmp}/strata_prepare_scale.XXXXXX")
trap 'rm -rf "$work"' EXIT
python3 - "$work/block.jsonl" tests/fixtures/kjv_excerpt.txt <<'PY'
import json, random, re, sys
words = sorted(set(re.findall(r"[A-Za-z']+", open(sys.argv[2], encoding="utf-8").read())))
rng = random.Random(1234)
out, total, i = open(sys.argv[1], "w", encoding="utf-8"), 0, 0
while total < 100_000_000:
    sentences = []
    for _ in range(rng.randint(3, 40)):
        s = " ".join(rng.choices(words, k=rng.randint(5, 25)))
        sentences.append(s[0].upper() + s[1:] + rng.choice([".", ".", "?", ";"]))
    text = " ".join(sentences)
    line = json.dumps({"id": i, "text": text}) + "\n"
    out.write(line)
    total += len(text)
    i += 1
print(f"block: {i} documents, {total/1e6:.1f} MB of text", file=sys.stderr)
PY
zstd -q -T0 -3 "$work/block.jsonl" -o "$work/block.jsonl.zst"
rm "$work/block.jsonl"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores"
printf "%-8s %10s %10s %12s %10s %10s\n" size_GB wall_s peak_MiB tokens MB/s shards
for gb in "${sizes[@]}"; do
  copies=$(python3 -c "print(max(1, round($gb * 10)))")
  corpus="$work/corpus_${gb}.jsonl.zst"
  if [ "$gb" = "0.1" ]; then cp "$work/block.jsonl.zst" "$corpus"; else
    for _ in $(seq "$copies"); do cat "$work/block.jsonl.zst"; done > "$corpus"; fi
  out="$work/out_$gb"
  /usr/bin/time -f "%e %M" -o "$work/time_$gb" "$strata" prepare --input "$corpus" --out "$out" \
    --vocab 8192 ${PREPARE_ARGS:-} > "$work/log_$gb" 2>&1
  read -r wall rss_kb < "$work/time_$gb"
  python3 - "$out/prepare_report.json" "$gb" "$wall" "$rss_kb" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); gb, wall, rss = sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
tokens = r["train"]["tokens"] + r["val"]["tokens"]
print(f"{gb:<8} {wall:10.1f} {rss/1024:10.0f} {tokens:12d} {r['seen']['bytes']/1e6/wall:10.1f} "
      f"{r['train']['shards'] + r['val']['shards']:10d}   (tokenizer sample {r['tokenizer_sample']['bytes']/2**20:.0f} MiB, "
      f"trained {r['tokenizer_seconds']:.1f} s, encoded {r['encode_seconds']:.1f} s, "
      f"duplicates {r['removed']['duplicate']['documents']} exact, {r['removed']['near_duplicate']['documents']} near)")
PY
  rm -rf "$out" "$corpus"
done
