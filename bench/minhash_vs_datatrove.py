#!/usr/bin/env python3
"""MinHash near-duplicate removal: `strata prepare --dedup minhash` beside datatrove's MinHash
pipeline (signature, buckets, cluster, filter; PyPI `datatrove`), on the same generated corpus
with planted copies, same parameters (word 5-grams, 14 buckets of 8 hashes). Prints the wall
time of each and how many of the planted copies each removed.

The corpus: BASE distinct documents (random words of the KJV excerpt's vocabulary, 100-400
words), plus near copies (one word in k replaced, k from 20 to 80: Jaccard of 5-grams about
0.8-0.95), exact copies, and far edits (one word in 3 replaced: Jaccard near 0, not duplicates),
shuffled.

  python3 -m venv /tmp/dtv && /tmp/dtv/bin/pip install datatrove
  /tmp/dtv/bin/python bench/minhash_vs_datatrove.py build/strata [BASE]
"""
import json, os, random, re, subprocess, sys, tempfile, time


def main():

    strata = sys.argv[1]
    base_n = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
    src = os.path.join(os.path.dirname(__file__), "..")
    words = sorted(set(re.findall(r"[a-z]+", open(os.path.join(src, "tests/fixtures/kjv_excerpt.txt")).read().lower())))
    rng = random.Random(7)


    def edit(doc, k):
        w = doc.split(" ")
        return " ".join("zebra" if (i + 1) % k == 0 else x for i, x in enumerate(w))


    base = [" ".join(rng.choices(words, k=rng.randint(100, 400))) for _ in range(base_n)]
    docs = [(d, "base") for d in base]
    docs += [(edit(rng.choice(base), rng.randint(20, 80)), "near") for _ in range(base_n // 10)]
    docs += [(rng.choice(base), "exact") for _ in range(base_n // 40)]
    docs += [(edit(rng.choice(base), 3), "far") for _ in range(base_n // 20)]
    rng.shuffle(docs)
    planted = {k: sum(1 for _, t in docs if t == k) for k in ("near", "exact", "far")}

    with tempfile.TemporaryDirectory() as work:
        corpus = os.path.join(work, "in", "c.jsonl")
        os.makedirs(os.path.dirname(corpus))
        with open(corpus, "w") as f:
            for i, (d, _) in enumerate(docs):
                f.write(json.dumps({"id": str(i), "text": d}) + "\n")
        mb = os.path.getsize(corpus) / 1e6
        print(f"corpus: {len(docs)} documents ({mb:.1f} MB): {base_n} distinct, {planted['near']} near "
              f"copies, {planted['exact']} exact copies, {planted['far']} far edits (not copies)")

        def run_strata(dedup):
            out = os.path.join(work, "strata_" + dedup)
            t0 = time.time()
            subprocess.run([strata, "prepare", "--input", corpus, "--out", out, "--vocab", "1000",
                            "--dedup", dedup], check=True, stdout=subprocess.DEVNULL)
            rep = json.load(open(os.path.join(out, "prepare_report.json")))["removed"]
            return time.time() - t0, rep["duplicate"]["documents"] + rep["near_duplicate"]["documents"]

        t_none, _ = run_strata("none")
        t_min, removed = run_strata("minhash")
        print(f"strata    removed {removed:6d}  whole prepare {t_min:6.1f} s, of which dedup ~{t_min - t_none:5.1f} s "
              f"(prepare without dedup {t_none:.1f} s; {os.cpu_count()} threads)")

        from datatrove.executor import LocalPipelineExecutor
        from datatrove.pipeline.dedup import (MinhashConfig, MinhashDedupBuckets, MinhashDedupCluster,
                                              MinhashDedupFilter, MinhashDedupSignature)
        from datatrove.pipeline.readers import JsonlReader
        from datatrove.pipeline.writers import JsonlWriter
        from datatrove.utils.hashing import HashConfig
        # 5-grams, 14 buckets x 8 hashes: the parameters strata uses. sha1 shingle hashes: datatrove
        # 0.10.1's xxhash path passes str to xxhash 3.x, which wants bytes.
        cfg = MinhashConfig(hash_config=HashConfig(hash_fc="sha1"))
        d = lambda n: os.path.join(work, "dt", n)
        t0 = time.time()
        stages = [
            [JsonlReader(os.path.join(work, "in")), MinhashDedupSignature(output_folder=d("sigs"), config=cfg)],
            [MinhashDedupBuckets(input_folder=d("sigs"), output_folder=d("buckets"), config=cfg)],
            [MinhashDedupCluster(input_folder=d("buckets"), output_folder=d("remove"), config=cfg)],
            [JsonlReader(os.path.join(work, "in")),
             MinhashDedupFilter(input_folder=d("remove"), exclusion_writer=JsonlWriter(d("removed"))),
             JsonlWriter(d("kept"))],
        ]
        for i, st in enumerate(stages):
            n = cfg.num_buckets if i == 1 else 1
            LocalPipelineExecutor(pipeline=st, tasks=n, workers=min(n, os.cpu_count()),
                                  logging_dir=d(f"logs{i}")).run()
        t_dt = time.time() - t0
        removed_dt = 0
        for root, _, files in os.walk(d("removed")):
            for fn in files:
                import gzip
                opener = gzip.open if fn.endswith(".gz") else open
                with opener(os.path.join(root, fn), "rt") as f:
                    removed_dt += sum(1 for _ in f)
        print(f"datatrove removed {removed_dt:6d}  dedup alone {t_dt:6.1f} s ({os.cpu_count()} workers)")
        print(f"planted copies: {planted['near'] + planted['exact']} (near + exact)")


# datatrove's executor starts worker processes that import this file: only the main one runs.
if __name__ == "__main__":
    main()
