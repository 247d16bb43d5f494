#!/usr/bin/env python3
"""disco's tokenizers (models/tokenizer, through disco_tokenize) against Hugging Face's
`tokenizers` and `sentencepiece`, token-exact, on corpus.json.

Tokenizers are trained here by those libraries' own trainers, into a temporary directory:
byte-level BPE with Llama 3's and Qwen's split regex (Qwen's with NFC), GPT-2's ByteLevel with
Digits, SentencePiece-style BPE with byte_fallback as Llama 2 (Prepend + Replace normalizer) and
as Mistral (Metaspace, prepend_scheme "first"), as transformers converts a SentencePiece
model (legacy or not), with added tokens special and not (lstrip,
rstrip, single_word, normalized), every Split behavior and invert, NFKC, NFD, NFKD, Strip and
contiguous Digits, and sentencepiece's BPE and
unigram models (tokenizer.model). For each, every corpus record's ids (with and without special
tokens) and the decode of those ids must equal the library's; and random id sequences (byte
tokens, special tokens, ids past the vocabulary) must decode the same, whole and streamed.

Bytes that are not valid UTF-8 (corpus.json's bytes_hex): the libraries encode str, so disco's
encode of the raw bytes is compared with theirs of bytes.decode("utf-8", "replace"), the
conversion disco makes (tokenizer.h).

With --python-path, disco.Tokenizer (the Python binding) is compared too.

  check_tokenizers.py DISCO_TOKENIZE [--keep DIR] [--python-path BUILD/python]
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

import sentencepiece as spm
from tokenizers import Regex, Tokenizer, AddedToken, decoders, models, normalizers
from tokenizers import pre_tokenizers, processors, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+"
          r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
        r"|\s*[\r\n]+|\s+(?!\S)|\s+")
BYTES = [f"<0x{b:02X}>" for b in range(256)]
disco = None  # the package, with --python-path


def corpus():
    with open(os.path.join(HERE, "corpus.json"), encoding="utf-8") as f:
        c = json.load(f)
    records = [t.encode("utf-8") for t in c["text"]] + [bytes.fromhex(h) for h in c["bytes_hex"]]
    return records, c["text"]


def training_text(texts):
    extra = ["the cat sat on the mat and the dog ate the bone", "tokenizers merge pairs of bytes",
             "Привет мир и снова привет", "你好你好世界世界", "1234 5678 12 34 56",
             "hello hello world world !!!"]
    return (texts + extra) * 20


def byte_level(texts, pattern, nfc=False):
    tok = Tokenizer(models.BPE())
    if nfc:
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    special = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot|>"]
    trainer = trainers.BpeTrainer(vocab_size=700, special_tokens=special,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(training_text(texts), trainer)
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                      special_tokens=[("<|begin_of_text|>", bos)])])
    tok.add_tokens([AddedToken("<mask>", lstrip=True, rstrip=True, special=False)])
    if not nfc:  # Llama 3's: a word that is a token is that token, merges or not
        state = json.loads(tok.to_str())
        state["model"]["ignore_merges"] = True
        tok = Tokenizer.from_str(json.dumps(state))
    return tok


def gpt2(texts):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=True)])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=True)
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(training_text(texts), trainer)
    tok.add_tokens([AddedToken("<mask>", single_word=True)])
    return tok


def with_byte_fallback(tok, texts, trainer, **bpe_args):
    """Trains `tok`, then adds the 256 <0xNN> tokens and sets byte_fallback (the trainer has no
    such option)."""
    tok.train_from_iterator(training_text(texts), trainer)
    state = json.loads(tok.to_str())
    vocab = state["model"]["vocab"]
    for b in BYTES:
        vocab.setdefault(b, len(vocab))
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in state["model"]["merges"]]
    new = Tokenizer(models.BPE(vocab, merges, byte_fallback=True, **bpe_args))
    for key in ("normalizer", "pre_tokenizer", "decoder"):
        setattr(new, key, getattr(tok, key))
    for t in state["added_tokens"]:
        new.add_special_tokens([AddedToken(t["content"], special=True, normalized=False)])
    return new


def llama2(texts):
    tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    trainer = trainers.BpeTrainer(vocab_size=500, special_tokens=["<unk>", "<s>", "</s>"],
                                  limit_alphabet=120)
    tok = with_byte_fallback(tok, texts, trainer, unk_token="<unk>", fuse_unk=True)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A",
                                                       special_tokens=[("<s>", tok.token_to_id("<s>"))])
    # normalized: matched in the normalized text, its content normalized too ("▁the cat")
    tok.add_tokens([AddedToken("the cat", normalized=True), AddedToken("<mask>", rstrip=True)])
    return tok


def mistral(texts):
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    tok.decoder = decoders.Sequence([decoders.ByteFallback(),
                                     decoders.Metaspace(replacement="▁", prepend_scheme="first")])
    trainer = trainers.BpeTrainer(vocab_size=500, special_tokens=["<unk>", "<s>", "</s>"],
                                  limit_alphabet=100)
    tok = with_byte_fallback(tok, texts, trainer, unk_token="<unk>", ignore_merges=True)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A",
                                                       special_tokens=[("<s>", tok.token_to_id("<s>"))])
    tok.add_tokens([AddedToken("word", normalized=True), AddedToken("<|eot|>", lstrip=True)])
    return tok


def split_variants(base):
    """The byte-level model with a Split of each behavior (and invert) before ByteLevel."""
    out = {}
    for behavior in ("removed", "isolated", "merged_with_previous", "merged_with_next", "contiguous"):
        for invert in (False, True):
            tok = Tokenizer.from_str(base.to_str())
            pattern = Regex(r"\s+|\d") if invert else " "
            tok.pre_tokenizer = pre_tokenizers.Sequence([
                pre_tokenizers.Split(pattern, behavior=behavior, invert=invert),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
            out[f"split-{behavior}{'-invert' if invert else ''}"] = tok
    return out


def stage_variants(base):
    """The byte-level model behind other normalizers and pre-tokenizers."""
    out = {}
    for name, normalizer in (("nfkc-strip", normalizers.Sequence([normalizers.NFKC(),
                                                                 normalizers.Strip()])),
                             ("nfd", normalizers.NFD()), ("nfkd", normalizers.NFKD())):
        tok = Tokenizer.from_str(base.to_str())
        tok.normalizer = normalizer
        out[name] = tok
    tok = Tokenizer.from_str(base.to_str())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=False),
        pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=False)])
    out["digits-contiguous"] = tok
    return out


def run_tool(tool, mode, path, records, tmp):
    rec_path = os.path.join(tmp, "records")
    with open(rec_path, "wb") as f:
        for r in records:
            f.write(b"%d\n" % len(r) + r)
    out = subprocess.run([tool, mode, path, rec_path], capture_output=True, check=False)
    if out.returncode != 0:
        sys.exit(f"FAIL: disco_tokenize {mode} {path}: {out.stderr.decode(errors='replace')}")
    return [line.split(" | ") for line in out.stdout.decode().splitlines()]


def random_ids(n_vocab, specials, rng, count=60):
    seqs = []
    for _ in range(count):
        ids = [rng.randrange(n_vocab) for _ in range(rng.randrange(1, 12))]
        if rng.random() < 0.3:
            ids.insert(rng.randrange(len(ids) + 1), rng.choice(specials))
        seqs.append(ids)
    seqs.append([n_vocab + 5, 0, n_vocab + 100])  # ids without a token are left out
    return seqs


def fail(name, what, record, mine, theirs):
    sys.exit(f"FAIL: {name}: {what} of {record!r}:\n  disco: {mine}\n  them:  {theirs}")


def check_python(name, directory, records, encode, decode):
    """disco.Tokenizer (the Python binding) on the corpus: the same ids and text."""
    if disco is None:
        return
    mine = disco.Tokenizer(directory)
    for rec in records:
        text = rec.decode("utf-8", "replace")
        ids = encode(text)
        if mine.encode(rec) != ids or mine.encode(text) != ids:
            fail(name, "disco.Tokenizer.encode", rec, mine.encode(rec), ids)
        if mine.decode(ids) != decode(ids):
            fail(name, "disco.Tokenizer.decode", ids, mine.decode(ids), decode(ids))


def check_hf(name, tok, tool, records, tmp, rng):
    os.makedirs(os.path.join(tmp, name), exist_ok=True)
    path = os.path.join(tmp, name, "tokenizer.json")
    tok.save(path)
    check_python(name, os.path.dirname(path), records, lambda t: tok.encode(t).ids,
                 lambda ids: tok.decode(ids, skip_special_tokens=False))
    for rec, (with_s, without, dec) in zip(records, run_tool(tool, "encode", path, records, tmp)):
        text = rec.decode("utf-8", "replace")
        ids = tok.encode(text).ids
        if with_s.split() != [str(i) for i in ids]:
            fail(name, "encode", rec, with_s, ids)
        plain = tok.encode(text, add_special_tokens=False).ids
        if without.split() != [str(i) for i in plain]:
            fail(name, "encode (no special tokens)", rec, without, plain)
        theirs = tok.decode(ids, skip_special_tokens=False).encode().hex() or "-"
        if dec != theirs:
            fail(name, "decode of the ids", rec, dec, theirs)
    specials = [t.id for t in [tok.get_added_tokens_decoder()[k] for k in []]] or \
        [i for i, t in tok.get_added_tokens_decoder().items()]
    seqs = random_ids(tok.get_vocab_size(), specials or [0], rng)
    if any(b in tok.get_vocab() for b in BYTES):  # an emoji split over byte tokens
        seqs.append([tok.token_to_id(f"<0x{b:02X}>") for b in "a😀é".encode()])
        seqs.append([tok.token_to_id(f"<0x{b:02X}>") for b in "😀".encode()[:3]])
    check_decodes(name, tool, path, seqs, tmp,
                  lambda ids, skip: tok.decode(ids, skip_special_tokens=skip))
    print(f"{name}: {len(records)} records encoded and decoded, {len(seqs)} id sequences decoded:"
          " equal")


def check_decodes(name, tool, path, seqs, tmp, decode):
    rows = run_tool(tool, "decode", path, [" ".join(map(str, s)).encode() for s in seqs], tmp)
    for ids, (whole, streamed, skipped) in zip(seqs, rows):
        theirs = decode(ids, False).encode().hex() or "-"
        if whole != theirs:
            fail(name, "decode", ids, whole, theirs)
        if streamed != whole:
            fail(name, "streamed decode", ids, streamed, whole)
        theirs = decode(ids, True).encode().hex() or "-"
        if skipped is not None and skipped != theirs:
            fail(name, "decode (skipping special tokens)", ids, skipped, theirs)


def check_sp(name, model_type, texts, tool, records, tmp, rng):
    os.makedirs(os.path.join(tmp, name), exist_ok=True)
    prefix = os.path.join(tmp, name, "tokenizer")
    data = os.path.join(tmp, name + ".txt")
    with open(data, "w", encoding="utf-8") as f:
        f.write("\n".join(t.replace("\n", " ") for t in training_text(texts)))
    spm.SentencePieceTrainer.train(input=data, model_prefix=prefix, vocab_size=800, hard_vocab_limit=False,
                                   model_type=model_type, byte_fallback=True,
                                   character_coverage=0.98, minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file=prefix + ".model")
    check_python(name, os.path.dirname(prefix), records, lambda t: [sp.bos_id()] + sp.encode(t),
                 sp.decode)
    for rec, (with_s, without, dec) in zip(records,
                                           run_tool(tool, "encode", prefix + ".model", records, tmp)):
        ids = sp.encode(rec.decode("utf-8", "replace"))
        if without.split() != [str(i) for i in ids]:
            fail(name, "encode", rec, without, ids)
        if with_s.split() != [str(i) for i in [sp.bos_id()] + ids]:
            fail(name, "encode (with BOS)", rec, with_s, ids)
        if dec != (sp.decode([sp.bos_id()] + ids).encode().hex() or "-"):
            fail(name, "decode of the ids", rec, dec, sp.decode(ids))
    truncated = prefix + ".truncated.model"
    with open(prefix + ".model", "rb") as f, open(truncated, "wb") as g:
        g.write(f.read()[:300])
    out = subprocess.run([tool, "encode", truncated, os.devnull], capture_output=True, check=False)
    err = out.stderr.decode(errors="replace")
    if out.returncode != 1 or err.count("\n") != 1 or truncated not in err:
        sys.exit(f"FAIL: {name}: a truncated model, exit {out.returncode}: {err!r}")
    seqs = random_ids(sp.get_piece_size(), [sp.bos_id(), sp.eos_id()], rng)[:-1]
    check_decodes(name, tool, prefix + ".model", seqs, tmp,
                  lambda ids, skip: sp.decode([i for i in ids if not skip or not sp.is_control(i)
                                               and not sp.is_unknown(i)]))
    print(f"{name}: {len(records)} records encoded and decoded, {len(seqs)} id sequences decoded:"
          " equal")
    return prefix + ".model"


def converted(model_file, legacy):
    """The tokenizer.json transformers makes of a SentencePiece model (as Llama 2's, TinyLlama's
    and Mistral's checkpoints hold): legacy, or Metaspace with prepend_scheme "first"."""
    import transformers
    return transformers.LlamaTokenizer(vocab_file=model_file, legacy=legacy).backend_tokenizer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tool")
    ap.add_argument("--keep", help="write the tokenizers here (and keep them)")
    ap.add_argument("--python-path", help="where the disco package is: disco.Tokenizer too")
    args = ap.parse_args()
    global disco
    if args.python_path:
        sys.path.insert(0, args.python_path)
        import disco
    records, texts = corpus()
    rng = random.Random(1234)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = args.keep or tmp
        os.makedirs(tmp, exist_ok=True)
        llama3 = byte_level(texts, LLAMA3)
        tokenizers = {"llama3": llama3, "qwen": byte_level(texts, QWEN, nfc=True), "gpt2": gpt2(texts),
                      "llama2": llama2(texts), "mistral": mistral(texts)}
        tokenizers.update(split_variants(llama3))
        tokenizers.update(stage_variants(llama3))
        for name, tok in tokenizers.items():
            check_hf(name, tok, args.tool, records, tmp, rng)
        for model_type in ("bpe", "unigram"):
            if model_type == "unigram" and not spm.__version__.startswith("0.1."):
                # 0.2 breaks ties between equal segmentations unlike Debian's libsentencepiece 0.1
                print(f"sp-unigram: not compared (sentencepiece {spm.__version__}, not 0.1.x)")
                continue
            model_file = check_sp("sp-" + model_type, model_type, texts, args.tool, records, tmp,
                                  rng)
            if model_type == "bpe":
                for legacy in (True, False):
                    check_hf(f"llama-from-sp{'-legacy' if legacy else ''}",
                             converted(model_file, legacy), args.tool, records, tmp, rng)
    print("PASS")


if __name__ == "__main__":
    main()
