#!/usr/bin/env python3
"""Checks strata's tokenizer.json against Hugging Face `tokenizers` (pip install tokenizers).

Both directions:
  1. strata trains a tokenizer and saves tokenizer.json; `tokenizers` loads it and must encode
     and decode every test string exactly as strata does.
  2. `tokenizers` trains a byte-level BPE and saves it (merges as [a, b] pairs in recent
     versions); strata loads it and must encode every test string exactly as `tokenizers` does.

Usage: python3 tests/data/check_hf_tokenizer.py build-data/tests/strata_test_data
Exits 0 on success, 1 on a mismatch, 77 (skip) when `tokenizers` is not installed (1 under CI).
"""
import json
import os
import subprocess
import sys
import tempfile

def skip(reason):
    """A missing dependency: skipped outside CI (exit 77, the reason printed), failed under CI."""
    if os.environ.get("CI"):
        print("FAILED (CI is set, so this is not a skip): " + reason)
        sys.exit(1)
    print("SKIP: " + reason)
    sys.exit(77)


try:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
except ImportError:
    skip("python package `tokenizers` is not installed (scripts/install_deps.sh)")

STRINGS = [
    "Hello world",
    "I'm sure they're fine, don't worry; WE'LL see. 'quoted'",
    "In the beginning God created the heaven and the earth.",
    "numbers 123 4567 3.14159 and 1,000,000",
    "  leading spaces, trailing spaces   ",
    "tabs\tand\nnewlines\n\n\nand\r\nwindows line ends",
    "punctuation!!! ??? ... --- (brackets) [more] {braces} <tags> @#$%^&*",
    "über café naïve résumé Ångström",
    "Ελληνικά και русский текст",
    "日本語のテキストと中文文本",
    "emoji 😀👍🏽 family 👨‍👩‍👧 flags 🇩🇪",
    "combining e\u0301 and nbsp\u00a0here\u2003em space",
    "mixed123abc_def-ghi",
    "",
    " ",
    "\n",
]


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    binary = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "strings.json"), "w") as f:
            json.dump(STRINGS, f)

        hf = Tokenizer(models.BPE())
        hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        hf.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["<|endoftext|>"],
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                      show_progress=False)
        corpus = [" ".join(STRINGS)] * 20 + [
            "the quick brown fox jumps over the lazy dog " * 50]
        hf.train_from_iterator(corpus, trainer)
        os.makedirs(os.path.join(tmp, "hf"))
        hf.save(os.path.join(tmp, "hf", "tokenizer.json"))

        env = dict(os.environ, STRATA_HF_INTEROP_DIR=tmp)
        run = subprocess.run([binary, "--gtest_filter=HfInterop.*"], env=env,
                             capture_output=True, text=True)
        if run.returncode != 0:
            print(run.stdout, run.stderr)
            return 1

        failures = 0
        for name in ["strata", "hf"]:
            tok = Tokenizer.from_file(os.path.join(tmp, name, "tokenizer.json"))
            with open(os.path.join(tmp, name, "ids.json")) as f:
                strata_ids = json.load(f)
            for text, want in zip(STRINGS, strata_ids):
                got = tok.encode(text, add_special_tokens=False).ids
                if got != want:
                    failures += 1
                    print(f"[{name}] {text!r}\n  tokenizers: {got}\n  strata:     {want}")
                if tok.decode(want, skip_special_tokens=False) != text:
                    failures += 1
                    print(f"[{name}] tokenizers decodes {want} to "
                          f"{tok.decode(want)!r}, not {text!r}")
            eot = tok.token_to_id("<|endoftext|>")
            print(f"{name}: vocab {tok.get_vocab_size()}, <|endoftext|> = {eot}, "
                  f"{len(STRINGS)} strings compared")
        if failures:
            print(f"FAILED: {failures} mismatches")
            return 1
        print("OK: tokenizers and strata agree on both tokenizer.json files")
        return 0


if __name__ == "__main__":
    sys.exit(main())
