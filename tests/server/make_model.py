#!/usr/bin/env python3
"""A tiny checkpoint for disco-llm-server's tests: tests/llama/tiny_checkpoint.py's random Llama
(numpy alone) with a byte-level BPE tokenizer.json written here by hand (the 256 byte tokens, a
few merges, <s> as BOS), so that the server's tests need no PyPI package.

  make_model.py OUT_DIR [tiny_checkpoint.py's flags: --hidden 512 --layers 4 ...]
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
VOCAB = 320  # 256 bytes, merges, <s>: the checkpoint's vocabulary is larger than the tokenizer's


def byte_chars():
    """GPT-2's bytes_to_unicode: a printable character for every byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def tokenizer_json():
    chars = byte_chars()
    vocab = {chars[b]: b for b in range(256)}
    merges = []
    for a, b in [("h", "e"), ("l", "l"), ("he", "ll"), ("hell", "o"), ("Ġ", "w"), ("o", "r")]:
        merges.append(f"{a} {b}")
        vocab[a + b] = len(vocab)
    bos = len(vocab)
    added = {"id": bos, "content": "<s>", "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True}
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [added],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [bos], "tokens": ["<s>"]}}},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }


def main():
    out = sys.argv[1]
    subprocess.run([sys.executable, os.path.join(HERE, "..", "llama", "tiny_checkpoint.py"), out,
                    "--vocab", str(VOCAB), *sys.argv[2:]], check=True)
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer_json(), f, ensure_ascii=False)


if __name__ == "__main__":
    main()
