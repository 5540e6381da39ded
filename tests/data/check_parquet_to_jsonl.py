#!/usr/bin/env python3
"""tools/parquet_to_jsonl.py end to end: a Parquet file (several row groups, an extra column, a
non-ASCII document) converts to JSON Lines (.jsonl.zst), which `strata prepare` reads into the
same shards as the same documents given as a text file.

Usage: check_parquet_to_jsonl.py STRATA SOURCE_DIR. Exit 77 (skip) without pyarrow, 1 under CI.
"""
import os
import subprocess
import sys
import tempfile


def skip(reason):
    if os.environ.get("CI"):
        print("FAILED (CI is set, so this is not a skip): " + reason)
        sys.exit(1)
    print("SKIP: " + reason)
    sys.exit(77)


try:
    import pyarrow as pa
    import pyarrow.parquet as pq
except ImportError:
    skip("python package `pyarrow` is not installed (scripts/install_deps.sh installs it)")

strata, src = sys.argv[1], sys.argv[2]
text = open(os.path.join(src, "tests/fixtures/kjv_excerpt.txt"), encoding="utf-8").read()
docs = [d for d in text.split("\n\n") if d]
docs.append("caf\u00e9 \u4e2d\u6587 \U0001F600 and a \"quote\"")
with tempfile.TemporaryDirectory() as work:
    table = pa.table({"id": list(range(len(docs))), "content": docs})
    pq.write_table(table, os.path.join(work, "c.parquet"), row_group_size=7)
    subprocess.run([sys.executable, os.path.join(src, "tools/parquet_to_jsonl.py"),
                    os.path.join(work, "c.parquet"), "--column", "content", "--keep", "id",
                    "--out", os.path.join(work, "c.jsonl.zst"), "--batch-rows", "5"], check=True)
    with open(os.path.join(work, "c.txt"), "w", encoding="utf-8") as f:
        f.write("\n\n".join(docs))

    def prepare(inp, out):
        subprocess.run([strata, "prepare", "--input", inp, "--out", out, "--vocab", "300"],
                       check=True, stdout=subprocess.DEVNULL)
        return open(os.path.join(out, "train_000.bin"), "rb").read()

    a = prepare(os.path.join(work, "c.jsonl.zst"), os.path.join(work, "from_parquet"))
    b = prepare(os.path.join(work, "c.txt"), os.path.join(work, "from_text"))
    if a != b:
        print("FAILED: the converted Parquet file prepares into different shards than the text")
        sys.exit(1)
    # Parquet given to strata directly: one message naming the converter.
    r = subprocess.run([strata, "prepare", "--input", os.path.join(work, "c.parquet"), "--out",
                        os.path.join(work, "x")], capture_output=True, text=True)
    if r.returncode == 0 or "parquet_to_jsonl" not in r.stderr + r.stdout:
        print("FAILED: a Parquet input is refused with a pointer to the converter:", r.stderr)
        sys.exit(1)
print(f"OK: {len(docs)} documents through Parquet -> JSON Lines (zstd) -> the same shards")
