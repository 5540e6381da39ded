#!/usr/bin/env python3
"""strata encodes Hugging Face byte-level BPE tokenizer.json files token for token as `tokenizers`.

`tokenizers` (pip install tokenizers) trains a small byte-level BPE (vocab 3000) for each family,
with that family's pre-tokenizer, normalizer and model options, and saves its tokenizer.json:
  gpt2         ByteLevel (GPT-2 regex), <|endoftext|>
  gpt2-prefix  the same with add_prefix_space = true
  llama3       Split(Llama 3 regex, Isolated) + ByteLevel, ignore_merges, specials added after
               the vocabulary (<|begin_of_text|>, <|end_of_text|>, reserved ones, <|eot_id|>)
  qwen2        NFC + Split(Qwen2 regex) + ByteLevel, <|endoftext|> <|im_start|> <|im_end|> and a
               non-special added token
  o200k        Split(GPT-4o's o200k regex) + ByteLevel: a pattern strata has no hand-written
               matcher for, run on PCRE2
Then both encode the King James Bible (Debian's bible-kjv, as scripts/corpus.sh writes it; 2378
paragraphs) and a Unicode stress set (CJK, emoji with ZWJ sequences and flags, combining marks,
decomposed and composed accents, digit runs, whitespace runs, \\r\\n, tabs, upper-case
contractions, special tokens mid-text, invalid UTF-8, random strings over those characters).
strata runs through tests/data/tool/strata_tokenize_tool (encode_batch, as `strata prepare`).
Compared, id for id, document by document:
  parse  strata with EncodeOptions.parse_special   vs  tokenizers' encode(text)
  split  strata's default (specials are text)      vs  tokenizers with split_special_tokens
  saved  the file strata saves, loaded by tokenizers and by strata, encodes as the original
Invalid UTF-8: tokenizers gets the bytes as Python's bytes.decode("utf-8", errors="replace")
reads them; strata gets the bytes (InvalidUtf8::replace, the default of every family here but
GPT-2's, whose default keeps the bytes and is set to replace for the comparison).
Also prints encode throughput on one core, strata against tokenizers.

Usage: python3 tests/data/check_hf_tokenizer_exact.py build/tests/strata_tokenize_tool SOURCE_DIR
Exits 0 when every id matches, 1 on the first mismatch (printed with context), 77 (skip) when
`tokenizers` or the KJV text is missing (1 under CI).
"""
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import time

# tokenizers' thread pool reads this once: one core, for the throughput comparison.
os.environ.setdefault("RAYON_NUM_THREADS", "1")


def skip(reason):
    """A missing dependency: skipped outside CI (exit 77, the reason printed), failed under CI."""
    if os.environ.get("CI"):
        print("FAILED (CI is set, so this is not a skip): " + reason)
        sys.exit(1)
    print("SKIP: " + reason)
    sys.exit(77)


try:
    import tokenizers
    from tokenizers import (Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers,
                            trainers)
except ImportError:
    skip("python package `tokenizers` is not installed (scripts/install_deps.sh)")

GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
          r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}")
O200K = "|".join([
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"\p{N}{1,3}", r" ?[^\s\p{L}\p{N}]+[\r\n/]*", r"\s*[\r\n]+", r"\s+(?!\S)", r"\s+"])
LLAMA3_SPECIALS = (["<|begin_of_text|>", "<|end_of_text|>"]
                   + [f"<|reserved_special_token_{i}|>" for i in range(6)]
                   + ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"])
QWEN2_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

STRESS = [
    "Hello world! I'M sure THEY'RE fine, DON'T worry; WE'LL see. 'quoted' it'S x'Ve y'D",
    "numbers 1 12 123 1234 12345 1234567890 3.14159 1,000,000 ٣٤٥٦٧ １２３４ ²³ ½",
    "  leading spaces, trailing spaces   \t\ttabs\t \n\n\nnewlines\r\n\r\nwindows\r\n  x \r\n",
    "日本語のテキストと中文文本，한국어 텍스트。Ελληνικά και русский текст עברית العربية",
    "emoji 😀👍🏽 family 👨‍👩‍👧‍👦 flags 🇩🇪🇯🇵 keycap 1️⃣ heart ❤️ 🏳️‍🌈",
    "composed caf\u00e9 na\u00efve r\u00e9sum\u00e9 vs decomposed cafe\u0301 nai\u0308ve "
    "re\u0301sume\u0301 \u212b \u1100\u1161\u11a8 a\u0323\u0307 e\u0301\u0301",
    "combining ◌̰ x\u0308\u0304 \u0915\u094d\u0937 \u0e01\u0e34 zero\u200bwidth nbsp\u00a0here "
    "em\u2003space ideo\u3000space nel\u0085line sep\u2028line mvs\u180eend",
    "Hello<|endoftext|>world <|endoftext|> <|endoftext|><|endoftext|> partial <|endoftext",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>x"
    "<|reserved_special_token_3|>y <|end_of_text|> z<|reserved_special_token_5|>",
    "non-special <tool_call>{\"a\": 1}</tool_call> and ſtrange 'ſ x'ſ LONG S",
    "punctuation!!! ??? ... --- (brackets) [more] {braces} <tags> @#$%^&* path/to/file.txt",
    "mixed123abc_def-ghi CamelCaseWord snake_case_word URL https://example.com/a?b=c&d=e",
    "",
    " ",
    "\n",
    "\r\n",
    "a",
]
INVALID = [
    b"abc\xff\xfe def",
    b"\xe2\x82 truncated three-byte \xe2\x82",
    b"caf\xc3",
    b"\xf0\x9f\x98 truncated emoji \xf0\x9f\x98\x80 ok",
    b"\xed\xa0\x80 surrogate \xc0\xaf overlong \xf4\x90\x80\x80 too big",
    b"<|endoftext|>\xff<|im_start|>\x80",
    b"\xe1\x80\xe1\x80\x80 mixed",
]
# Characters where the patterns' alternatives (and NFC) differ, for random strings.
POOL = (list("aZzeé日本'sStTrReEvVmMlLdD019 ") + [
    " ", " ", "  ", "\t", "\n", "\r", "\r\n", "\u00a0", "\u3000", "\u0085", "\u2028", "\u180e",
    ".", ",", "!", "?", "(", ")", "-", "/", "_", "#", "\u017f", "\u0663", "\u00b2", "\uff11",
    "😀", "\u200d", "👩", "🇩", "🇪", "\u0301", "\u0308", "e\u0301", "\u00e9", "\u212b", "\u1100",
    "\u1161", "\u0915", "\u094d", "\uac00", "<|endoftext|>", "<|im_start|>", "<|eot_id|>",
    "<|end_of_text|>", "<tool_call>", "<|", "|>", "\ufffd", "\x0b", "\x0c", "\x00"])


def families():
    """(name, tokenizer before training, special tokens given to the trainer, added after)."""
    out = []

    def bpe(ignore_merges=False):
        return Tokenizer(models.BPE(ignore_merges=ignore_merges))

    def sequence(pattern):
        return pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])

    t = bpe()
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    out.append(("gpt2", t, ["<|endoftext|>"], [], []))
    t = bpe()
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    out.append(("gpt2-prefix", t, ["<|endoftext|>"], [], []))
    t = bpe(ignore_merges=True)
    t.pre_tokenizer = sequence(LLAMA3)
    out.append(("llama3", t, [], LLAMA3_SPECIALS, []))
    t = bpe()
    t.normalizer = normalizers.NFC()
    t.pre_tokenizer = sequence(QWEN2)
    out.append(("qwen2", t, [], QWEN2_SPECIALS, ["<tool_call>", "</tool_call>"]))
    t = bpe()
    t.pre_tokenizer = sequence(O200K)
    out.append(("o200k", t, ["<|endoftext|>"], [], []))
    for _, tok, _, _, _ in out:
        tok.decoder = decoders.ByteLevel()
    return out


def kjv_text(source_dir):
    path = os.path.join(source_dir, "data", "kjv.txt")
    if os.path.exists(path) and os.path.getsize(path) > 0:
        with open(path, "rb") as f:
            return f.read()
    if not shutil.which("bible"):
        skip("the KJV text is missing: no data/kjv.txt and no `bible` (Debian's bible-kjv)")
    # What scripts/corpus.sh writes to data/kjv.txt.
    return subprocess.run(["bible", "gen1:1-rev22:21"], check=True, capture_output=True).stdout


def documents(kjv):
    """The byte strings to encode: KJV paragraphs, then the stress set."""
    docs = []
    for para in kjv.split(b"\n\n"):
        docs.append(para + b"\n\n")
    kjv_docs = len(docs)
    docs += [s.encode("utf-8") for s in STRESS]
    docs.append("".join(STRESS).encode("utf-8"))
    docs += INVALID
    rng = random.Random(20)
    for _ in range(2000):
        docs.append("".join(rng.choice(POOL) for _ in range(rng.randint(1, 40))).encode("utf-8"))
    for _ in range(200):  # random bytes, mostly ASCII, some never valid
        docs.append(bytes(rng.choice([rng.randint(32, 126), rng.randint(0x80, 0xFF)])
                          for _ in range(rng.randint(1, 30))))
    return docs, kjv_docs


def write_docs(path, docs):
    with open(path, "wb") as f:
        for d in docs:
            f.write(struct.pack("<I", len(d)))
            f.write(d)


def read_ids(path):
    with open(path, "rb") as f:
        data = f.read()
    out, pos = [], 0
    while pos < len(data):
        (n,) = struct.unpack_from("<I", data, pos)
        out.append(list(struct.unpack_from(f"<{n}i", data, pos + 4)))
        pos += 4 + 4 * n
    return out


def run_tool(tool, tokenizer_json, docs_bin, ids_bin, *flags):
    cmd = [tool, tokenizer_json, docs_bin, ids_bin, *flags]
    threads = os.environ.get("OMP_NUM_THREADS", "2")
    run = subprocess.run(cmd, capture_output=True, text=True,
                         env=dict(os.environ, OMP_NUM_THREADS=threads))
    if run.returncode != 0:
        print(f"FAILED: {' '.join(cmd)} exited {run.returncode}\n{run.stdout}{run.stderr}")
        sys.exit(1)
    return last_json(run.stdout), read_ids(ids_bin)


def last_json(stdout):
    return json.loads(stdout.strip().splitlines()[-1])


def compare(label, hf, texts, want, got):
    """Returns the number of ids compared; prints the first mismatch with context and exits."""
    assert len(want) == len(got), (len(want), len(got))
    total = 0
    for i, (w, g) in enumerate(zip(want, got)):
        if w != g:
            n = min(len(w), len(g))
            k = next((j for j in range(n) if w[j] != g[j]), n)

            def tokens(ids):
                return [hf.id_to_token(x) for x in ids]

            print(f"FAILED [{label}] document {i} ({len(texts[i])} chars), first difference at "
                  f"token {k} (tokenizers {len(w)} tokens, strata {len(g)}):")
            print(f"  tokenizers: ...{w[max(0, k - 5):k + 6]} {tokens(w[max(0, k - 5):k + 6])}")
            print(f"  strata:     ...{g[max(0, k - 5):k + 6]} {tokens(g[max(0, k - 5):k + 6])}")
            enc = hf.encode(texts[i], add_special_tokens=False)
            at = enc.offsets[k][0] if k < len(enc.offsets) else len(texts[i])
            print(f"  text around character {at}: {texts[i][max(0, at - 40):at + 40]!r}")
            sys.exit(1)
        total += len(w)
    return total


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    tool, source_dir = sys.argv[1], sys.argv[2]
    kjv = kjv_text(source_dir)
    docs, kjv_docs = documents(kjv)
    texts = [d.decode("utf-8", errors="replace") for d in docs]
    print(f"tokenizers {tokenizers.__version__}; {len(docs)} documents: {kjv_docs} KJV paragraphs "
          f"({len(kjv)} bytes), {len(docs) - kjv_docs} stress")
    split_specials = hasattr(Tokenizer(models.BPE()), "encode_special_tokens")
    if not split_specials:
        print(f"note: tokenizers {tokenizers.__version__} has no split_special_tokens "
              "(encode_special_tokens): strata's default mode is not compared")

    corpus = texts[:kjv_docs + len(STRESS) + 1]  # KJV and the stress strings
    with tempfile.TemporaryDirectory() as tmp:
        docs_bin = os.path.join(tmp, "docs.bin")
        write_docs(docs_bin, docs)
        kjv_bin = os.path.join(tmp, "kjv.bin")
        write_docs(kjv_bin, docs[:kjv_docs])
        for name, hf, trainer_specials, added_specials, added_plain in families():
            trainer = trainers.BpeTrainer(
                vocab_size=3000, special_tokens=trainer_specials, show_progress=False,
                initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
            hf.train_from_iterator(corpus, trainer)
            hf.add_special_tokens(added_specials)
            hf.add_tokens(added_plain)
            path = os.path.join(tmp, f"{name}.json")
            hf.save(path)
            ids_bin = os.path.join(tmp, f"{name}.ids")

            want = [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
            saved = os.path.join(tmp, f"{name}.strata.json")
            info, got = run_tool(tool, path, docs_bin, ids_bin, "--parse-special",
                                 "--invalid-utf8", "replace", "--save", saved)
            n_parse = compare(f"{name} parse", hf, texts, want, got)

            # The file strata saves: tokenizers and strata both encode as before.
            hf_saved = Tokenizer.from_file(saved)
            again = [e.ids for e in hf_saved.encode_batch(texts, add_special_tokens=False)]
            compare(f"{name} saved, tokenizers", hf, texts, want, again)
            _, got_saved = run_tool(tool, saved, docs_bin, ids_bin, "--parse-special",
                                    "--invalid-utf8", "replace")
            compare(f"{name} saved, strata", hf, texts, want, got_saved)

            n_split = 0
            if split_specials:
                hf.encode_special_tokens = True  # split_special_tokens=True
                want = [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
                hf.encode_special_tokens = False
                # strata's defaults: invalid bytes replaced, except in GPT-2's pipeline.
                default, got = run_tool(tool, path, docs_bin, ids_bin)
                if default["invalid_utf8"] != ("keep" if name == "gpt2" else "replace"):
                    print(f"FAILED: {name} keeps or replaces invalid UTF-8 by default: {default}")
                    return 1
                if default["invalid_utf8"] == "keep":
                    _, got = run_tool(tool, path, docs_bin, ids_bin, "--invalid-utf8", "replace")
                n_split = compare(f"{name} split", hf, texts, want, got)

            # Throughput on one core: KJV paragraphs, encode_batch on both sides.
            kjv_texts = texts[:kjv_docs]
            best = 1e30
            for _ in range(3):
                t0 = time.perf_counter()
                hf.encode_batch(kjv_texts, add_special_tokens=False)
                best = min(best, time.perf_counter() - t0)
            hf_mbs = len(kjv) / 1e6 / best
            bench = [tool, path, kjv_bin, os.path.join(tmp, "kjv.ids"), "--bench", "3"]
            run = subprocess.run(bench, capture_output=True, text=True,
                                 env=dict(os.environ, OMP_NUM_THREADS="1"))
            if run.returncode != 0:
                print(f"FAILED: bench of {name}: {run.stderr}")
                return 1
            strata_mbs = last_json(run.stdout)["mb_per_s"]
            print(f"{name:12s} vocab {info['vocab_size']}, separator {info['separator_id']}: "
                  f"{n_parse} ids equal (specials parsed), {n_split} ids equal (specials as text), "
                  f"saved file equal; one core: strata {strata_mbs:.1f} MB/s, tokenizers "
                  f"{hf_mbs:.1f} MB/s ({strata_mbs / hf_mbs:.1f}x)")
            if strata_mbs < 3 * hf_mbs:  # timings on a shared machine: reported, not failed
                print(f"note: {name} encodes below 3x tokenizers' speed on one core")
    print("OK: strata encodes every document exactly as tokenizers does, in every family")
    return 0


if __name__ == "__main__":
    sys.exit(main())
