#!/usr/bin/env python3
"""disco-demo --text end to end: a tiny random Llama checkpoint (transformers) with a tokenizer
trained here in the same directory, tokenizer.json (byte-level BPE as Llama 3's) or
tokenizer.model (sentencepiece BPE); `disco-demo --model DIR --text A --text B` at 2 ranks must
print, for each prompt, the text of transformers' greedy tokens as the tokenizer library decodes
them. And the refusals: --text without a tokenizer in the directory, --text with --prompt.

  check_demo_text.py MPIEXEC DISCO_DEMO [mpiexec flags...]
"""
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import sentencepiece as spm
import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_tokenizers as ct  # noqa: E402  (the trainers and the corpus)

NEW_TOKENS = 8
TEXTS = ["Hello, world! I'm here", "Привет, мир 你好 😀"]
TIMEOUT = 600  # against a hang only


def make_model(out_dir, vocab_size):
    """A random Llama whose greedy choices are clear (the best two logits apart) for TEXTS."""
    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2,
                                      vocab_size=vocab_size, max_position_embeddings=256,
                                      tie_word_embeddings=False)
    torch.manual_seed(7)
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.5 / p.shape[1] ** 0.5 if p.shape[0] != vocab_size else 1.0)
    model.save_pretrained(out_dir)
    return model


def greedy(model, ids):
    ids = list(ids)
    with torch.no_grad():
        for _ in range(NEW_TOKENS):
            logits = model(torch.tensor([ids]), use_cache=False).logits[0, -1]
            top2 = torch.topk(logits, 2).values
            if float(top2[0] - top2[1]) < 1e-3:
                sys.exit("FAIL: the model's best two logits are too close for a fair comparison")
            ids.append(int(logits.argmax()))
    return ids[-NEW_TOKENS:]


def run_demo(mpiexec, demo, flags, args):
    cmd = [mpiexec, "-n", "2", *flags, demo, "--warmup", "0", "--max-new-tokens", str(NEW_TOKENS),
           *args]
    r = subprocess.run(cmd, capture_output=True, timeout=TIMEOUT, check=False)
    return r.returncode, r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")


def texts_of(stdout):
    m = re.search(r"^--- text 1 ---\n(.*)^--- end of text ---$", stdout, re.S | re.M)
    if not m:
        sys.exit(f"FAIL: no text blocks in disco-demo's output:\n{stdout}")
    blocks = re.split(r"^--- text \d+ ---\n", "--- text 1 ---\n" + m.group(1), flags=re.M)[1:]
    return [b[:-1] if b.endswith("\n") else b for b in blocks]


def check_case(name, out_dir, encode, decode, vocab_size, mpiexec, demo, flags):
    model = make_model(out_dir, vocab_size)
    want = [decode(greedy(model, encode(t))) for t in TEXTS]
    args = ["--model", out_dir]
    for t in TEXTS:
        args += ["--text", t]
    code, out, err = run_demo(mpiexec, demo, flags, args)
    if code != 0:
        sys.exit(f"FAIL: {name}: disco-demo exit {code}:\n{out}\n{err}")
    got = texts_of(out)
    if got != want:
        sys.exit(f"FAIL: {name}: disco-demo printed {got!r}, transformers and the tokenizer "
                 f"{want!r}")
    print(f"{name}: {len(TEXTS)} prompts, {NEW_TOKENS} tokens each: the same text {got!r}")


def check_refusals(out_dir, mpiexec, demo, flags):
    os.remove(os.path.join(out_dir, "tokenizer.model"))
    code, out, err = run_demo(mpiexec, demo, flags, ["--model", out_dir, "--text", "hi"])
    line = f"{out_dir}: no tokenizer (looked for tokenizer.json and tokenizer.model)"
    if code == 0 or line not in err:
        sys.exit(f"FAIL: --text without a tokenizer: exit {code}, wanted '{line}':\n{out}\n{err}")
    code, out, err = run_demo(mpiexec, demo, flags,
                              ["--model", out_dir, "--text", "hi", "--prompt", "1,2"])
    if code != 2 or "not both" not in err:
        sys.exit(f"FAIL: --text with --prompt: exit {code}:\n{out}\n{err}")
    print("refusals: no tokenizer, --text with --prompt: one line each")


def main():
    mpiexec, demo, flags = sys.argv[1], sys.argv[2], sys.argv[3:]
    _, texts = ct.corpus()
    with tempfile.TemporaryDirectory() as tmp:
        d = os.path.join(tmp, "llama3")
        os.makedirs(d)
        tok = ct.byte_level(texts, ct.LLAMA3)
        tok.save(os.path.join(d, "tokenizer.json"))
        check_case("tokenizer.json", d, lambda t: tok.encode(t).ids,
                   lambda ids: tok.decode(ids, skip_special_tokens=False), 768, mpiexec, demo,
                   flags)
        d = os.path.join(tmp, "sp")
        os.makedirs(d)
        data = os.path.join(tmp, "train.txt")
        with open(data, "w", encoding="utf-8") as f:
            f.write("\n".join(t.replace("\n", " ") for t in ct.training_text(texts)))
        spm.SentencePieceTrainer.train(input=data, model_prefix=os.path.join(d, "tokenizer"),
                                       vocab_size=800, hard_vocab_limit=False, model_type="bpe",
                                       byte_fallback=True, character_coverage=0.98, minloglevel=2)
        sp = spm.SentencePieceProcessor(model_file=os.path.join(d, "tokenizer.model"))
        check_case("tokenizer.model", d, lambda t: [sp.bos_id()] + sp.encode(t), sp.decode,
                   sp.get_piece_size() + sp.get_piece_size() % 2, mpiexec, demo, flags)
        check_refusals(d, mpiexec, demo, flags)
    print("PASS")


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
