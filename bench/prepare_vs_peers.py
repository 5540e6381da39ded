#!/usr/bin/env python3
"""`strata prepare` beside its peers: encoding a corpus, and training a tokenizer.

On one generated JSON Lines (zstd) corpus and the same number of cores, this measures

  encode   tokens, tokens/s, text MB/s, wall and CPU seconds and peak RSS of
           - strata: `strata prepare --tokenizer T` (OMP_NUM_THREADS = 1, 2): the whole
             command, and its report's encode_seconds (the encode pass: read, parse, encode,
             write shards; summed over workers when the report counts "units");
           - HF tokenizers: `Tokenizer.from_file(T).encode_batch(...)` over the same documents
             (zstandard + orjson, batches of --batch-docs), RAYON_NUM_THREADS = 1, 2; encode
             seconds are the encode_batch calls alone, the wall includes reading;
           - datatrove: JsonlReader -> DocumentTokenizer(T) (token files written, no shuffle),
             LocalPipelineExecutor with tasks = workers = 1, 2 (one file per task or more);
           - strata on 2 processes: `mpirun -n 2 ... strata prepare` (skipped, and said so,
             when the binary does not split the prepare across ranks).
  train    a 32k byte-level BPE (GPT-2 pre-tokenizer) on the same sample (the first --sample-mb
           of documents): `strata prepare` without --tokenizer against HF's BpeTrainer, seconds
           and peak RSS at 1 and 2 threads.

T is a GPT-2-style byte-level BPE of 50,257 tokens trained once by HF tokenizers on the sample
(no Hub access); every tool encodes with that file, and strata's tokens are first checked
against HF's, token for token, on --verify-docs documents.

The corpus (deterministic, generated once under --work): English-like documents of Zipf-
distributed words (the KJV excerpt's vocabulary, then ~250k pseudo-words, numbers and some
non-ASCII words), capitalised sentences with punctuation, paragraphs; about 2 KB a document,
split into --files files. Peak RSS: GNU time's (the largest single process) and, sampled every
0.2 s, the sum over the process tree (what multi-process runs hold together).

Runs are interleaved (every tool at 1 core, then every tool at 2) and repeated --repeats times,
the fastest kept, since a shared machine makes single timings noisy. The table is printed as
markdown and written, with everything measured, to WORK/results_<gb>gb_<time>.{md,json}; each
invocation runs in its own WORK/runs_<time>_<pid> (the tools' logs stay there).

  bench/prepare_vs_peers.py --gb 0.1                      # quick
  bench/prepare_vs_peers.py --gb 1 --repeats 2 --strata build/strata  # the recorded run
  bench/prepare_vs_peers.py --gb 1 --modes strata,hf --threads 1

Needs python3 (it creates or reuses the venv --venv with tokenizers, datatrove, orjson and
zstandard from PyPI, and runs itself there), /usr/bin/time (Debian package `time`), and mpirun
for the strata-mpi mode.
"""
import argparse
import datetime
import functools
import glob
import io
import json
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
VENV_PACKAGES = ["tokenizers", "datatrove", "orjson", "zstandard"]
ENCODE_MODES = ["strata", "hf", "datatrove", "strata-mpi"]
MODES = ENCODE_MODES + ["train"]
EOT = "<|endoftext|>"
ENCODE_VOCAB = 50257  # GPT-2's size: 256 bytes, 50,000 merges, <|endoftext|>
GEN_VERSION = 1  # bump when the generated corpus changes
MiB = 1 << 20


# ---- the corpus ------------------------------------------------------------------------------

ONSETS = ["", "b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v",
          "w", "z", "br", "ch", "cl", "cr", "dr", "fl", "gr", "pl", "pr", "sh", "sl", "sp", "st",
          "str", "th", "tr", "wh"]
VOWELS = ["a", "e", "i", "o", "u", "y", "ai", "ea", "ee", "io", "oo", "ou"]
CODAS = [""] * 12 + ["n", "r", "s", "t", "l", "m", "d", "nd", "ng", "nt", "rs", "st", "ck", "x"]
FOREIGN = ["café", "naïve", "façade", "über", "Zürich", "São", "señor", "niño", "crème",
           "brûlée", "déjà", "smörgåsbord", "Ελλάδα", "λόγος", "Москва", "привет", "東京",
           "日本語", "北京", "中文", "서울", "한국어", "مرحبا", "שלום", "नमस्ते", "😀", "🚀",
           "…", "—", "€100", "½", "™", "Straße", "İstanbul", "Ångström", "Łódź", "Dvořák"]
# Word forms: plain, then the decorated ones; sentence starts are capitalised, ends punctuated.
PLAIN, COMMA, CAP, QUOTED, PAREN, COLON, PERIOD, QUESTION, EXCLAIM = range(9)


def vocabulary(np):
    """Words in Zipf rank order and their cumulative probabilities (deterministic)."""
    rng = np.random.default_rng(20261204)
    with open(os.path.join(HERE, "..", "tests", "fixtures", "kjv_excerpt.txt"),
              encoding="utf-8") as f:
        counts = {}
        for w in re.findall(r"[a-z]+", f.read().lower()):
            counts[w] = counts.get(w, 0) + 1
    real = sorted(counts, key=lambda w: (-counts[w], w))
    seen, pseudo = set(real), []
    while len(pseudo) < 250_000:
        n = int(rng.choice([1, 2, 2, 2, 3, 3, 4]))
        w = "".join(ONSETS[rng.integers(len(ONSETS))] + VOWELS[rng.integers(len(VOWELS))]
                    + CODAS[rng.integers(len(CODAS))] for _ in range(n))
        if w not in seen:
            seen.add(w)
            pseudo.append(w)
    numbers = []
    for k in range(5_000):
        x = int(rng.integers(0, 100_000))
        forms = [str(1700 + x % 330), str(x), f"{x / 100:.2f}", f"{x:,}", f"{x % 100}%"]
        numbers.append(forms[k % 5])
    # Shorter words are more frequent, as in natural languages; numbers a little less so.
    tail = pseudo + numbers
    key = np.array([len(w) for w in tail], dtype=float) + rng.normal(0, 2, size=len(tail))
    key[len(pseudo):] += 3
    tail = [tail[i] for i in np.argsort(key, kind="stable")]
    words = real + tail
    for i, w in enumerate(FOREIGN):
        words.insert(50 + 50 * i, w)
    weights = 1.0 / (np.arange(len(words)) + 3.0) ** 1.07
    cdf = np.cumsum(weights)
    return words, cdf / cdf[-1]


@functools.lru_cache(maxsize=1)
def word_forms():
    """Every word in every form (at form * len(words) + word), the word count, the cdf."""
    import numpy as np
    words, cdf = vocabulary(np)
    cap = [w[:1].upper() + w[1:] for w in words]
    forms = (words + [w + "," for w in words] + cap + [f'"{w}"' for w in words]
             + [f"({w})" for w in words] + [w + ":" for w in words] + [w + "." for w in cap]
             + [w + "?" for w in words] + [w + "!" for w in words])
    return forms, len(words), cdf


def generate_file(path, index, text_bytes):
    """Writes documents to path (JSON Lines, zstd) until they hold text_bytes of text."""
    import numpy as np
    import orjson
    import zstandard
    forms, v, cdf = word_forms()
    rng = np.random.default_rng([GEN_VERSION, index])
    docs = total = 0
    with open(path + ".tmp", "wb") as fh, zstandard.ZstdCompressor(level=3).stream_writer(fh) as z:
        while total < text_bytes:
            n_sent = np.clip(rng.lognormal(2.7, 0.8, size=256).astype(np.int64), 1, 400)
            sent_len = rng.integers(4, 31, size=int(n_sent.sum()))
            n_words = int(sent_len.sum())
            idx = np.minimum(np.searchsorted(cdf, rng.random(n_words), side="right"), v - 1)
            u = rng.random(n_words)
            form = np.select([u < 0.07, u < 0.09, u < 0.095, u < 0.10, u < 0.103],
                             [COMMA, CAP, QUOTED, PAREN, COLON], PLAIN)
            ends = np.cumsum(sent_len)
            starts = ends - sent_len
            form[starts] = CAP
            e = rng.random(len(ends))
            form[ends - 1] = np.select([e < 0.86, e < 0.94], [PERIOD, QUESTION], EXCLAIM)
            toks = [forms[c] for c in (form * v + idx).tolist()]
            seps = np.select([e < 0.18, e < 0.22], [2, 1], 0).tolist()  # "\n\n", "\n", " "
            lines, s = [], 0
            for n in n_sent.tolist():
                parts = []
                for j in range(s, s + n):
                    parts.append(" ".join(toks[starts[j]:ends[j]]))
                    parts.append(("\n\n", "\n", " ")[2 - seps[j]] if j + 1 < s + n else "")
                s += n
                text = "".join(parts)
                lines.append(orjson.dumps({"id": f"{index:02d}-{docs}", "text": text}))
                docs += 1
                total += len(text.encode("utf-8"))
                if total >= text_bytes:
                    break
            z.write(b"\n".join(lines) + b"\n")
    os.replace(path + ".tmp", path)
    return docs, total


def ensure_corpus(work, gb, n_files):
    """The corpus of gb GB of text in n_files files under work; generated when absent."""
    folder = os.path.join(work, f"corpus_{gb:g}gb_{n_files}f")
    meta_path = os.path.join(folder, "corpus.json")
    if os.path.exists(meta_path):
        with open(meta_path) as f:
            meta = json.load(f)
        if meta.get("generator") == GEN_VERSION:
            return meta
    os.makedirs(folder, exist_ok=True)
    files = [os.path.join(folder, f"part_{i:02d}.jsonl.zst") for i in range(n_files)]
    per_file = int(gb * 1e9 / n_files)
    print(f"generating {gb:g} GB of text in {n_files} files under {folder} ...", flush=True)
    t0 = time.time()
    with multiprocessing.Pool(min(n_files, os.cpu_count())) as pool:
        sizes = pool.starmap(generate_file, [(p, i, per_file) for i, p in enumerate(files)])
    meta = {"generator": GEN_VERSION, "folder": folder, "files": files,
            "documents": sum(d for d, _ in sizes), "text_bytes": sum(b for _, b in sizes),
            "zst_bytes": sum(os.path.getsize(p) for p in files)}
    with open(meta_path, "w") as f:
        json.dump(meta, f, indent=1)
    print(f"  {meta['documents']} documents, {meta['text_bytes'] / 1e6:.0f} MB of text, "
          f"{meta['zst_bytes'] / 1e6:.0f} MB compressed, in {time.time() - t0:.0f} s", flush=True)
    return meta


def iter_lines(files):
    """The raw JSON lines of the corpus files, in order."""
    import zstandard
    for path in files:
        with open(path, "rb") as fh, zstandard.ZstdDecompressor().stream_reader(fh) as r:
            yield from io.BufferedReader(r, 1 << 20)


def write_subset(path, lines):
    """Writes lines as a JSON Lines file; returns (documents, text bytes)."""
    import orjson
    docs = size = 0
    with open(path + ".tmp", "wb") as f:
        for line in lines:
            f.write(line)
            docs += 1
            size += len(orjson.loads(line)["text"].encode("utf-8"))
    os.replace(path + ".tmp", path)
    return docs, size


def ensure_sample(corpus, sample_mb):
    """The first sample_mb MB of documents (text) as one uncompressed JSON Lines file."""
    import orjson
    path = os.path.join(corpus["folder"], f"sample_{sample_mb}mb.jsonl")
    meta_path = path + ".json"
    if not os.path.exists(meta_path):
        def lines():
            total = 0
            for line in iter_lines(corpus["files"]):
                total += len(orjson.loads(line)["text"].encode("utf-8"))
                if total > sample_mb * 1e6:
                    return
                yield line
        docs, size = write_subset(path, lines())
        with open(meta_path, "w") as f:
            json.dump({"path": path, "documents": docs, "text_bytes": size}, f)
    with open(meta_path) as f:
        return json.load(f)


def ensure_verify_docs(corpus, n):
    """n documents taken evenly from the corpus files' beginnings, as one JSON Lines file."""
    path = os.path.join(corpus["folder"], f"verify_{n}.jsonl")
    if not os.path.exists(path):
        per_file = max(1, n // len(corpus["files"]))
        lines = []
        for f in corpus["files"]:
            for k, line in enumerate(iter_lines([f])):
                if k == per_file:
                    break
                lines.append(line)
        write_subset(path, lines)
    return path


# ---- workers: run as `prepare_vs_peers.py --worker NAME JSON` in the venv --------------------

def hf_train(sample, vocab, out):
    """Trains a GPT-2-style byte-level BPE with HF tokenizers on the sample; saves it to out."""
    import orjson
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    os.makedirs(os.path.dirname(out), exist_ok=True)
    t0 = time.perf_counter()
    with open(sample, "rb") as f:
        docs = [orjson.loads(line)["text"] for line in f]
    read_s = time.perf_counter() - t0
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=[EOT], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    t0 = time.perf_counter()
    tok.train_from_iterator(docs, trainer, length=len(docs))
    train_s = time.perf_counter() - t0
    tok.save(out)
    return {"read_s": read_s, "train_s": train_s, "vocab": tok.get_vocab_size()}


def hf_encode(files, tokenizer, batch_docs):
    """Encodes the corpus with encode_batch; encode_s counts the encode_batch calls alone."""
    import orjson
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(tokenizer)
    t0 = time.perf_counter()
    encode_s = 0.0
    docs = tokens = 0
    batch = []

    def flush():
        nonlocal encode_s, tokens
        t = time.perf_counter()
        encoded = tok.encode_batch(batch)
        encode_s += time.perf_counter() - t
        tokens += sum(len(e.ids) for e in encoded) + len(batch)  # + <|endoftext|> each
        batch.clear()

    for line in iter_lines(files):
        batch.append(orjson.loads(line)["text"])
        docs += 1
        if len(batch) == batch_docs:
            flush()
    if batch:
        flush()
    return {"documents": docs, "tokens": tokens, "encode_s": encode_s,
            "loop_s": time.perf_counter() - t0}


def datatrove_encode(folder, tasks, tokenizer, batch_docs, out):
    """JsonlReader -> DocumentTokenizer on tasks processes; tokens counted from the files."""
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.tokens import DocumentTokenizer
    pipeline = [
        JsonlReader(folder, glob_pattern="part_*.jsonl.zst", compression="zstd"),
        DocumentTokenizer(output_folder=os.path.join(out, "tokens"),
                          tokenizer_name_or_path=tokenizer, eos_token=EOT,
                          batch_size=batch_docs, shuffle_documents=False),
    ]
    t0 = time.perf_counter()
    LocalPipelineExecutor(pipeline=pipeline, tasks=tasks, workers=tasks,
                          logging_dir=os.path.join(out, "logs")).run()
    seconds = time.perf_counter() - t0
    token_size = 2 if ENCODE_VOCAB <= 65536 else 4
    nbytes = sum(os.path.getsize(p) for p in glob.glob(os.path.join(out, "tokens", "*.ds")))
    with open(os.path.join(out, "logs", "stats.json")) as f:
        stats = json.load(f)
    docs = next(s["stats"]["documents"]["total"] for s in stats if "Jsonl" in s["name"])
    return {"tokens": nbytes // token_size, "documents": docs, "pipeline_s": seconds}


WORKERS = {"hf_train": hf_train, "hf_encode": hf_encode, "datatrove": datatrove_encode}


# ---- running and measuring ------------------------------------------------------------------

def sample_tree(root, cpu):
    """(sum, largest) RSS in bytes over root and its descendants; records each one's CPU
    seconds so far in cpu (pid -> seconds)."""
    page, tick = os.sysconf("SC_PAGE_SIZE"), os.sysconf("SC_CLK_TCK")
    total = largest = 0
    stack = [root]
    while stack:
        pid = stack.pop()
        try:
            with open(f"/proc/{pid}/statm") as f:
                rss = int(f.read().split()[1]) * page
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as f:
                    stack.extend(int(c) for c in f.read().split())
        except (OSError, ValueError):
            continue
        cpu[pid] = (int(fields[11]) + int(fields[12])) / tick  # utime + stime
        total += rss
        largest = max(largest, rss)
    return total, largest


def measure(cmd, env, log_path):
    """Runs cmd under GNU time, sampling its process tree every 0.2 s. GNU time sees the
    processes it waits for (not, say, those of a forkserver): its peak RSS and CPU time are
    taken with the sampled ones, whichever is larger. rss_sum_mib: the sampled peak of the
    tree's summed RSS."""
    time_path = log_path + ".time"
    load = os.getloadavg()[0]
    cpu = {}
    with open(log_path, "w") as log:
        proc = subprocess.Popen(["/usr/bin/time", "-f", "%e %M %U %S", "-o", time_path, *cmd],
                                env=dict(os.environ, **env), stdout=log, stderr=subprocess.STDOUT)
        peak_sum = peak_one = 0
        while proc.poll() is None:
            total, one = sample_tree(proc.pid, cpu)
            peak_sum, peak_one = max(peak_sum, total), max(peak_one, one)
            time.sleep(0.2)
    with open(log_path) as f:
        output = f.read()
    if proc.returncode != 0:
        return {"ok": False, "rc": proc.returncode, "output": output}
    with open(time_path) as f:
        wall, max_kib, user, system = f.read().split()[-4:]
    return {"ok": True, "output": output, "wall_s": float(wall),
            "cpu_s": max(float(user) + float(system), sum(cpu.values())),
            "rss_mib": max(int(max_kib) * 1024, peak_one) / MiB, "rss_sum_mib": peak_sum / MiB,
            "load1": load}


def worker_cmd(name, **kwargs):
    return [sys.executable, os.path.abspath(__file__), "--worker", name, json.dumps(kwargs)]


def worker_result(output):
    """The worker's JSON result: the last line of its output that starts with RESULT."""
    lines = [line for line in output.splitlines() if line.startswith("RESULT ")]
    return json.loads(lines[-1][len("RESULT "):])


def strata_cmd(strata, inputs, out, extra):
    # Filters off in effect: no split, no repeated-line filter (the others filter nothing here).
    return [strata, "prepare", "--input", *inputs, "--out", out, "--val-fraction", "0",
            "--max-repeat-fraction", "1", *extra]


def read_report(out):
    with open(os.path.join(out, "prepare_report.json")) as f:
        return json.load(f)


def strata_encode_report(rep):
    """What an encode run's prepare_report.json says. Reports with "units" (prepare shared out
    in files and ranges) sum encode_seconds over the units, worker-seconds: per_worker."""
    return {"tokens": rep["train"]["tokens"], "documents": rep["kept"]["documents"],
            "removed": rep["seen"]["documents"] - rep["kept"]["documents"],
            "encode_s": rep["encode_seconds"], "per_worker": "units" in rep}


def read_strata_tokens(out):
    """strata's train shards as one token list."""
    import numpy as np
    tokens = []
    for path in sorted(glob.glob(os.path.join(out, "train_*.bin"))):
        header = np.fromfile(path, dtype="<i4", count=256)
        dtype = "<u2" if header[1] == 1 else "<u4"
        tokens.extend(np.fromfile(path, dtype=dtype, offset=1024).tolist())
    return tokens


class Bench:
    def __init__(self, args, corpus, runs, verify_texts):
        self.args = args
        self.corpus = corpus
        self.runs = runs
        self.verify_texts = verify_texts  # what trained tokenizers' compression is measured on

    def fresh(self, name):
        path = os.path.join(self.runs, name)
        shutil.rmtree(path, ignore_errors=True)
        return path

    def run(self, name, cmd, env):
        """One measured run; its outputs are removed afterwards (the disk is not infinite)."""
        out = self.fresh(name)
        log = os.path.join(self.runs, name + ".log")
        print(f"  {name} ...", end="", flush=True)
        m = measure([c.replace("{OUT}", out) for c in cmd], env, log)
        print(f" {m['wall_s']:.1f} s" if m["ok"] else f" failed (rc {m['rc']}, see {log})",
              flush=True)
        return m, out

    # -- encode --

    def encode(self, mode, threads, tokenizer):
        a, c = self.args, self.corpus
        name = f"encode_{mode}_{threads}"
        if mode in ("strata", "strata-mpi"):
            cmd = strata_cmd(a.strata, c["files"], "{OUT}", ["--tokenizer", tokenizer])
            if mode == "strata":
                m, out = self.run(name, cmd, {"OMP_NUM_THREADS": str(threads)})
            else:
                m, out = self.run(name, ["mpirun", "-n", str(threads), "--allow-run-as-root",
                                         "--oversubscribe", "-x", "OMP_NUM_THREADS=1", *cmd], {})
            if m["ok"]:
                try:
                    m.update(strata_encode_report(read_report(out)))
                except (OSError, KeyError, ValueError) as e:
                    m.update(ok=False, error=f"no usable prepare_report.json: {e}")
        elif mode == "hf":
            cmd = worker_cmd("hf_encode", files=c["files"], tokenizer=tokenizer,
                             batch_docs=a.batch_docs)
            m, out = self.run(name, cmd, {"RAYON_NUM_THREADS": str(threads),
                                          "TOKENIZERS_PARALLELISM": "true"})
            if m["ok"]:
                m.update(worker_result(m["output"]))
        else:  # datatrove: one process per task, each encoding on one thread
            cmd = worker_cmd("datatrove", folder=c["folder"], tasks=threads, tokenizer=tokenizer,
                             batch_docs=a.batch_docs, out="{OUT}")
            m, out = self.run(name, cmd, {"RAYON_NUM_THREADS": "1",
                                          "TOKENIZERS_PARALLELISM": "false"})
            if m["ok"]:
                m.update(worker_result(m["output"]))
        shutil.rmtree(out, ignore_errors=True)
        m.update(mode=mode, threads=threads, text_bytes=c["text_bytes"])
        m.pop("output", None)
        return m

    def mpi_splits(self, tokenizer, verify):
        """Whether `mpirun -n 2 strata prepare` splits the work (a probe on the verify docs):
        (True, "") or (False, why)."""
        out = self.fresh("probe_mpi")
        cmd = ["mpirun", "-n", "2", "--allow-run-as-root", "--oversubscribe", "-x",
               "OMP_NUM_THREADS=1", *strata_cmd(self.args.strata, [verify], out,
                                                ["--tokenizer", tokenizer])]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            last = (p.stderr or p.stdout).strip().splitlines() or [""]
            return False, f"mpirun -n 2 strata prepare failed (rc {p.returncode}): {last[-1]}"
        whole = re.findall(r"prepared \d+ file\(s\): (\d+) documents", p.stdout)
        n_docs = sum(1 for _ in open(verify, "rb"))
        if len(whole) >= 2 and all(int(d) == n_docs for d in whole):
            return False, ("this binary does not split prepare across ranks: each of the 2 "
                           "ranks prepared all the documents")
        return True, ""

    # -- train --

    def train(self, tool, threads, sample):
        a = self.args
        name = f"train_{tool}_{threads}"
        if tool == "strata":
            cmd = strata_cmd(a.strata, [sample["path"]], "{OUT}",
                             ["--vocab", str(a.train_vocab),
                              "--tokenizer-sample-bytes", str(sample["text_bytes"])])
            m, out = self.run(name, cmd, {"OMP_NUM_THREADS": str(threads)})
            if m["ok"]:
                rep = read_report(out)
                m.update(train_s=rep["tokenizer_seconds"], vocab=rep["vocab_size"],
                         sample_bytes=rep["tokenizer_sample"]["bytes"])
        else:
            cmd = worker_cmd("hf_train", sample=sample["path"], vocab=a.train_vocab,
                             out="{OUT}/tokenizer.json")
            m, out = self.run(name, cmd, {"RAYON_NUM_THREADS": str(threads),
                                          "TOKENIZERS_PARALLELISM": "true"})
            if m["ok"]:
                m.update(worker_result(m["output"]), sample_bytes=sample["text_bytes"])
        if m["ok"]:
            m["bytes_per_token"] = bytes_per_token(os.path.join(out, "tokenizer.json"),
                                                   self.verify_texts)
        shutil.rmtree(out, ignore_errors=True)
        m.update(tool=tool, threads=threads)
        m.pop("output", None)
        return m


def bytes_per_token(tokenizer, texts):
    """Compression of a tokenizer on texts (encoded by HF tokenizers)."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(tokenizer)
    n = sum(len(e.ids) for e in tok.encode_batch(texts))
    return sum(len(t.encode("utf-8")) for t in texts) / n


def verify_exact(args, tokenizer, verify, runs):
    """strata's tokens against HF's on the verify documents: a dict of what differs."""
    import orjson
    from tokenizers import Tokenizer
    out = os.path.join(runs, "verify")
    shutil.rmtree(out, ignore_errors=True)
    subprocess.run(strata_cmd(args.strata, [verify], out, ["--tokenizer", tokenizer]),
                   check=True, capture_output=True, env=dict(os.environ, OMP_NUM_THREADS="2"))
    got = read_strata_tokens(out)
    with open(verify, "rb") as f:
        texts = [orjson.loads(line)["text"] for line in f]
    tok = Tokenizer.from_file(tokenizer)
    eot = tok.token_to_id(EOT)
    want = [e.ids + [eot] for e in tok.encode_batch(texts)]
    docs, cur = [], []
    for t in got:
        cur.append(t)
        if t == eot:
            docs.append(cur)
            cur = []
    bad = [i for i in range(max(len(docs), len(want)))
           if i >= len(docs) or i >= len(want) or docs[i] != want[i]]
    result = {"documents": len(texts), "tokens_hf": sum(map(len, want)),
              "tokens_strata": len(got), "documents_differing": len(bad),
              "count_differing": sum(1 for i in bad if i >= len(docs) or i >= len(want)
                                     or len(docs[i]) != len(want[i]))}
    if bad:
        result["first_difference"] = {"document": bad[0], "text": texts[bad[0]][:200]
                                      if bad[0] < len(texts) else None}
    shutil.rmtree(out, ignore_errors=True)
    return result, texts


# ---- the report -----------------------------------------------------------------------------

def cpu_model():
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    field = dict(re.findall(r"^([^:\n]+):\s*(.*)$", out, re.M))
    return (f"{field.get('Model name', '?')} (family {field.get('CPU family', '?')} model "
            f"{field.get('Model', '?')}), {os.cpu_count()} cores")


def best(rows, **key):
    """The fastest successful run matching key, or None."""
    ok = [r for r in rows if r["ok"] and all(r.get(k) == v for k, v in key.items())]
    return min(ok, key=lambda r: r["wall_s"]) if ok else None


def rate(run, key):
    """Tokens per second of run's key ("wall_s", "encode_s", "cpu_s"); None without it."""
    return run["tokens"] / run[key] if run and run.get(key) else None


def encode_rates(run):
    """(tokens/s, tokens/s per core) of the encode phase: encode_s is that phase's wall time,
    or (per_worker) the sum of each worker's, which gives the rate per core directly."""
    r = rate(run, "encode_s")
    if r is None:
        return None, None
    return (None, r) if run.get("per_worker") else (r, r / run["threads"])


def fmt(x, spec=",.0f", suffix=""):
    return "—" if x is None else format(x, spec) + suffix


LABELS = {"strata": "strata prepare (threads)", "strata-mpi": "strata prepare, mpirun (ranks)",
          "hf": "HF tokenizers encode_batch (threads)", "datatrove": "datatrove (tasks)"}


def ratios(enc, threads):
    """strata against the peers at each core count; each tool's scaling across them."""
    vs = {}
    for t in threads:
        s, h, d = (best(enc, mode=m, threads=t) for m in ("strata", "hf", "datatrove"))
        h_enc = encode_rates(h)[1] if h else None
        for label, x, y in (
                ("strata ÷ HF encode_batch per core: strata's whole command (wall) against "
                 "the encode_batch calls alone", rate(s, "wall_s") and rate(s, "wall_s") / t,
                 h_enc),
                ("strata ÷ HF encode_batch per core: the encode phases",
                 encode_rates(s)[1] if s else None, h_enc),
                ("strata ÷ HF, whole commands (wall)", rate(s, "wall_s"), rate(h, "wall_s")),
                ("strata ÷ HF, tokens per CPU-second", rate(s, "cpu_s"), rate(h, "cpu_s")),
                ("strata ÷ datatrove, whole commands (wall)", rate(s, "wall_s"),
                 rate(d, "wall_s"))):
            if x and y:
                vs.setdefault(label, {})[str(t)] = x / y
    scaling = {}
    if len(threads) >= 2:
        lo, hi = threads[0], threads[-1]
        for mode, key in (("strata", "wall_s"), ("hf", "encode_s"), ("hf", "wall_s"),
                          ("datatrove", "wall_s")):
            x = rate(best(enc, mode=mode, threads=hi), key)
            y = rate(best(enc, mode=mode, threads=lo), key)
            if x and y:
                scaling[f"{mode} {lo}→{hi} ({key[:-2]})"] = x / y
        x = rate(best(enc, mode="strata-mpi", threads=hi), "wall_s")
        y = rate(best(enc, mode="strata", threads=hi), "wall_s")
        if x and y:
            scaling[f"strata {hi} ranks ÷ {hi} threads (wall)"] = x / y
    return vs, scaling


def encode_table(results):
    lines = ["| tool | cores | tokens | wall s | tokens/s (wall) | text MB/s (wall) | encode s | "
             "tokens/s (encode) | per core (encode) | CPU s | tokens/CPU-s | "
             "peak RSS MiB (largest / sum) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for mode in ENCODE_MODES:
        for t in results["threads"]:
            r = best(results["encode"], mode=mode, threads=t)
            if r:
                total, per_core = encode_rates(r)
                dagger = "†" if r.get("per_worker") else ""
                lines.append(
                    f"| {LABELS[mode]} | {t} | {r['tokens']:,} | {r['wall_s']:.1f} | "
                    f"{rate(r, 'wall_s'):,.0f} | {r['text_bytes'] / 1e6 / r['wall_s']:.1f} | "
                    f"{fmt(r.get('encode_s'), '.1f', dagger)} | {fmt(total)} | "
                    f"{fmt(per_core)} | {r['cpu_s']:.1f} | {rate(r, 'cpu_s'):,.0f} | "
                    f"{r['rss_mib']:,.0f} / {r['rss_sum_mib']:,.0f} |")
    lines += ["", "wall: the whole command. encode s: strata's encode_seconds (its encode pass: "
              "read, parse, encode, write shards; † summed over its workers' units, "
              "worker-seconds); HF's encode_batch calls alone (reading excluded); datatrove "
              "has none. Tokens include one <|endoftext|> per document. CPU s: user + system "
              "of every process (tokens/CPU-s is the least disturbed by other load). Peak RSS: "
              "the largest process (GNU time) / the process tree's sum (sampled every 0.2 s)."]
    if results["ratios"]:
        cols = results["threads"]
        lines += ["", "| ratio | " + " | ".join(f"{t} core(s)" for t in cols) + " |",
                  "|---|" + "---:|" * len(cols)]
        for label, per_t in results["ratios"].items():
            cells = (fmt(per_t.get(str(t)), ".2f", "×") for t in cols)
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    if results["scaling"]:
        lines += ["", "Scaling: " + "; ".join(f"{label} {value:.2f}×"
                                              for label, value in results["scaling"].items())]
    return lines


def train_table(results):
    sample = results["sample"]
    lines = [f"Tokenizer training, vocabulary {results['train_vocab']:,}, on the same "
             f"{sample['text_bytes'] / 1e6:.0f} MB ({sample['documents']:,} documents):", "",
             "| tool | threads | train s | wall s | CPU s | peak RSS MiB | bytes/token |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for tool, label in (("strata", "strata prepare (no --tokenizer)"),
                        ("hf", "HF tokenizers BpeTrainer")):
        for t in results["threads"]:
            r = best(results["train"], tool=tool, threads=t)
            if r:
                lines.append(f"| {label} | {t} | {r['train_s']:.1f} | {r['wall_s']:.1f} | "
                             f"{r['cpu_s']:.1f} | {r['rss_mib']:,.0f} | "
                             f"{r['bytes_per_token']:.3f} |")
    lines += ["", "train s: the training alone (strata's tokenizer_seconds, HF's "
              "train_from_iterator); wall: the whole command (strata also reads the sample "
              "twice and encodes it; HF reads it into a list). bytes/token: each trained "
              "tokenizer on the verify documents."]
    return lines


def report(results):
    c = results["corpus"]
    lines = [f"CPU: {results['cpu']}; {results['date']}; corpus {c['text_bytes'] / 1e9:.2f} GB "
             f"of text ({c['zst_bytes'] / 1e6:,.0f} MB zstd), {c['documents']:,} documents in "
             f"{len(c['files'])} files; encoding with a {results['tokenizer']['vocab']:,}-token "
             "byte-level BPE.", ""]
    if results["encode"]:
        lines += encode_table(results)
    if results["train"]:
        lines += [""] + train_table(results)
    v = results["verify"]
    lines += ["", f"Exactness: on {v['documents']} documents strata's tokens "
              + ("equal HF's, token for token." if v["documents_differing"] == 0 else
                 f"differ from HF's in {v['documents_differing']} documents "
                 f"({v['count_differing']} with a different count).")]
    totals = {f"{r['mode']} {r['threads']}": r["tokens"] for r in results["encode"] if r["ok"]}
    if len(set(totals.values())) > 1:
        lines.append("Token totals differ between runs: " + json.dumps(totals))
    elif totals:
        lines.append(f"Every encode run produced the same {next(iter(totals.values())):,} tokens.")
    lines += [f"Note: {note}" for note in results["notes"]]
    return "\n".join(lines)


# ---- main -----------------------------------------------------------------------------------

def ensure_venv(venv):
    """The venv's python, created and filled from PyPI when something is missing."""
    py = os.path.join(venv, "bin", "python")
    if not os.path.exists(py):
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    probe = "import " + ", ".join(VENV_PACKAGES) + ", numpy"
    if subprocess.run([py, "-c", probe], capture_output=True).returncode != 0:
        subprocess.run([py, "-m", "pip", "install", "-q", *VENV_PACKAGES], check=True)
    return py


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--strata", default="/tmp/pvp/strata", help="the strata binary")
    p.add_argument("--gb", type=float, default=1.0, help="corpus size, GB of text")
    p.add_argument("--files", type=int, default=8, help="corpus files (>= the most tasks)")
    p.add_argument("--work", default="/tmp/pvp", help="corpus, tokenizer, runs and results")
    p.add_argument("--venv", default="/tmp/dtv", help="venv for HF tokenizers and datatrove")
    p.add_argument("--modes", default=",".join(MODES),
                   help=f"comma-separated, of {','.join(MODES)}")
    p.add_argument("--threads", default="1,2", help="core counts to run each tool on")
    p.add_argument("--repeats", type=int, default=1, help="runs of each, the fastest kept")
    p.add_argument("--batch-docs", type=int, default=1000, help="HF and datatrove batch")
    p.add_argument("--sample-mb", type=int, default=100,
                   help="MB of text to train tokenizers on (the 50k one and the timed ones)")
    p.add_argument("--train-vocab", type=int, default=32768, help="vocabulary of timed training")
    p.add_argument("--verify-docs", type=int, default=400, help="documents checked exactly")
    args = p.parse_args()
    args.modes = [m for m in args.modes.split(",") if m]
    args.threads = [int(t) for t in args.threads.split(",")]
    unknown = set(args.modes) - set(MODES)
    if unknown:
        p.error(f"unknown modes {sorted(unknown)}")
    if "datatrove" in args.modes and max(args.threads) > args.files:
        p.error("datatrove needs a file per task: --files >= the most --threads")
    args.strata = os.path.abspath(args.strata)
    args.work = os.path.abspath(args.work)
    return args


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        print("RESULT " + json.dumps(WORKERS[sys.argv[2]](**json.loads(sys.argv[3]))), flush=True)
        return
    args = parse_args()
    if os.path.realpath(sys.prefix) != os.path.realpath(args.venv):
        py = ensure_venv(args.venv)
        os.execv(py, [py, os.path.abspath(__file__), *sys.argv[1:]])
    for tool in [args.strata, "/usr/bin/time"] + (["mpirun"] if "strata-mpi" in args.modes else []):
        if not shutil.which(tool):
            sys.exit(f"{tool} not found" + (" (apt-get install time)" if "time" in tool else ""))
    os.makedirs(args.work, exist_ok=True)
    corpus = ensure_corpus(args.work, args.gb, args.files)
    sample = ensure_sample(corpus, args.sample_mb)
    tokenizer = os.path.join(corpus["folder"], f"tokenizer_{ENCODE_VOCAB}_{args.sample_mb}mb.json")
    if not os.path.exists(tokenizer):
        print(f"training the {ENCODE_VOCAB}-token tokenizer on {sample['text_bytes'] / 1e6:.0f} MB "
              "with HF tokenizers ...", flush=True)
        hf_train(sample["path"], ENCODE_VOCAB, tokenizer)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    runs = os.path.join(args.work, f"runs_{stamp}_{os.getpid()}")
    os.makedirs(runs)
    verify_path = ensure_verify_docs(corpus, args.verify_docs)
    verify, verify_texts = verify_exact(args, tokenizer, verify_path, runs)
    bench = Bench(args, corpus, runs, verify_texts)
    print(f"exactness on {verify['documents']} documents: {verify['documents_differing']} differ",
          flush=True)

    notes = ["the machine was shared with other work: timings are noisy (runs interleaved, "
             f"the fastest of {args.repeats} kept; load average at each start in the JSON)"]
    modes = [m for m in ENCODE_MODES if m in args.modes]
    if "strata-mpi" in modes:
        ok, why = bench.mpi_splits(tokenizer, verify_path)
        if not ok:
            modes.remove("strata-mpi")
            notes.append(f"strata-mpi skipped: {why}")
    enc, tr = [], []
    for rep in range(args.repeats):
        for threads in args.threads:
            print(f"encode, {threads} core(s), round {rep + 1}:", flush=True)
            for mode in modes:
                if mode != "strata-mpi" or threads > 1:
                    enc.append(bench.encode(mode, threads, tokenizer))
        if "train" in args.modes:
            for threads in args.threads:
                print(f"train, {threads} thread(s), round {rep + 1}:", flush=True)
                for tool in ("strata", "hf"):
                    tr.append(bench.train(tool, threads, sample))
    for r in enc:
        if r.get("removed"):
            notes.append(f"{r['mode']} {r['threads']}: its filters removed {r['removed']} "
                         "documents")
        if not r["ok"]:
            notes.append(f"{r['mode']} {r['threads']} failed: {r.get('error', r.get('rc'))}")
    for r in tr:
        if r["ok"] and r["sample_bytes"] != sample["text_bytes"]:
            notes.append(f"{r['tool']} {r['threads']} trained on {r['sample_bytes']} bytes, "
                         f"not the sample's {sample['text_bytes']}")
    rat, scaling = ratios(enc, args.threads)
    results = {
        "date": datetime.date.today().isoformat(), "cpu": cpu_model(),
        "command": " ".join([os.path.relpath(__file__, os.getcwd()), *sys.argv[1:]]),
        "strata": args.strata, "corpus": corpus, "sample": sample, "threads": args.threads,
        "tokenizer": {"path": tokenizer, "vocab": ENCODE_VOCAB}, "train_vocab": args.train_vocab,
        "verify": verify, "encode": enc, "train": tr, "ratios": rat, "scaling": scaling,
        "notes": notes,
    }
    text = report(results)
    print("\n" + text)
    stem = os.path.join(args.work, f"results_{args.gb:g}gb_{stamp}")
    with open(stem + ".json", "w") as f:
        json.dump(results, f, indent=1)
    with open(stem + ".md", "w") as f:
        f.write(text + "\n")
    print(f"\nwritten: {stem}.md, {stem}.json")


if __name__ == "__main__":
    main()
