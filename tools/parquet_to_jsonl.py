#!/usr/bin/env python3
"""Converts Parquet files (FineWeb, most Hugging Face datasets) to JSON Lines for `strata prepare`.

strata reads JSON Lines (plain, .gz, .zst) natively; it does not link Apache Arrow (Debian 12 has
no libarrow package, and linking the one inside PyPI's pyarrow wheel would tie the strata binary
to a Python environment: docs/ARCHITECTURE.md). This streams each file a record batch at a time,
so memory stays bounded by one row group, and writes one JSON object per row with the chosen
column as "text" (and, with --keep, the other columns named). Output compression follows the
name: .zst (zstd) or .gz (gzip) through pyarrow's compressed streams, else plain.

  tools/parquet_to_jsonl.py data/*.parquet --column text --out corpus.jsonl.zst
  strata prepare --input corpus.jsonl.zst --out data/fineweb
Needs pyarrow (pip install pyarrow).
"""
import argparse
import json
import sys

try:
    import pyarrow as pa
    import pyarrow.parquet as pq
except ImportError:
    sys.exit("parquet_to_jsonl: needs pyarrow (pip install pyarrow)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("inputs", nargs="+", help="Parquet files, converted in the order given")
    ap.add_argument("--out", required=True, help="output .jsonl, .jsonl.gz or .jsonl.zst")
    ap.add_argument("--column", default="text", help="the column with the text (default text)")
    ap.add_argument("--keep", nargs="*", default=[], help="other columns to copy into each line")
    ap.add_argument("--batch-rows", type=int, default=8192, help="rows read at a time")
    a = ap.parse_args()
    codec = "zstd" if a.out.endswith((".zst", ".zstd")) else "gzip" if a.out.endswith(".gz") else None
    raw = pa.OSFile(a.out, "wb")
    out = pa.CompressedOutputStream(raw, codec) if codec else raw
    rows = 0
    try:
        for path in a.inputs:
            f = pq.ParquetFile(path)
            names = f.schema_arrow.names
            missing = [c for c in [a.column] + a.keep if c not in names]
            if missing:
                sys.exit(f"parquet_to_jsonl: {path} has no column(s) {missing}; it has {names}")
            for batch in f.iter_batches(batch_size=a.batch_rows, columns=[a.column] + a.keep):
                cols = {n: batch.column(n).to_pylist() for n in batch.schema.names}
                lines = []
                for i in range(batch.num_rows):
                    obj = {"text": cols[a.column][i]}
                    for k in a.keep:
                        obj[k] = cols[k][i]
                    lines.append(json.dumps(obj, ensure_ascii=False, default=str))
                out.write(("\n".join(lines) + "\n").encode("utf-8"))
                rows += batch.num_rows
    finally:
        out.close()
    print(f"parquet_to_jsonl: {rows} rows from {len(a.inputs)} file(s) -> {a.out}")


if __name__ == "__main__":
    main()
