#!/usr/bin/env python3
"""examples/generate.py --chat end to end, against transformers' own apply_chat_template.

A tiny random Qwen2 checkpoint (transformers) with a byte-level tokenizer trained here, ChatML's
special tokens, a chat template in tokenizer_config.json (and, in a second directory, the same in
chat_template.jinja) and an end-of-sequence id in generation_config.json. `generate.py --chat`
(with and without --system) at 2 ranks must print what transformers gives: its template rendered
by `apply_chat_template(..., add_generation_prompt=True)`, greedy tokens up to the first
end-of-sequence token, decoded without special tokens; and `generate.py --text`'s blocks, the text
of transformers' greedy tokens. Then bad templates, each one line naming the
file: none, one that does not parse, one that raises, one that the sandbox refuses.

  check_chat.py MPIEXEC GENERATE_PY [mpiexec flags...]     (PYTHONPATH: the built disco package)
"""
import json
import os
import subprocess
import sys
import tempfile

import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_tokenizers as ct  # noqa: E402  (the trainers and the corpus)

NEW_TOKENS = 12
TIMEOUT = 600  # against a hang only
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# ChatML, as Qwen2's template writes it (a default system message when none is given).
TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def train_tokenizer(texts):
    """Qwen2's kind: byte-level BPE, its split pattern, ChatML's special tokens, no BOS."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(ct.QWEN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=700, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(ct.training_text(texts), trainer)
    return tok


def make_checkpoint(d, texts):
    tok = train_tokenizer(texts)
    tok.save(os.path.join(d, "tokenizer.json"))
    vocab = tok.get_vocab_size()
    eos = tok.token_to_id("<|im_end|>")
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|im_end|>",
                   "pad_token": "<|endoftext|>", "bos_token": None, "chat_template": TEMPLATE}, f)
    config = transformers.Qwen2Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2,
                                      vocab_size=vocab + vocab % 2, max_position_embeddings=512,
                                      tie_word_embeddings=False, eos_token_id=eos)
    torch.manual_seed(11)
    model = transformers.Qwen2ForCausalLM(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.5 / p.shape[1] ** 0.5 if p.shape[0] != config.vocab_size else 1.0)
    model.generation_config.eos_token_id = eos
    model.save_pretrained(d)
    return model, eos


def expected(d, model, eos, messages):
    tokenizer = transformers.AutoTokenizer.from_pretrained(d)
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                        return_dict=False)
    if isinstance(ids, dict) or hasattr(ids, "input_ids"):
        ids = ids["input_ids"]
    ids = list(ids)
    new = []
    with torch.no_grad():
        for _ in range(NEW_TOKENS):
            logits = model(torch.tensor([ids + new]), use_cache=False).logits[0, -1]
            top2 = torch.topk(logits, 2).values
            if float(top2[0] - top2[1]) < 1e-3:
                sys.exit("FAIL: the model's best two logits are too close for a fair comparison")
            new.append(int(logits.argmax()))
            if new[-1] == eos:
                break
    cut = new[:new.index(eos)] if eos in new else new
    return tokenizer.decode(cut, skip_special_tokens=True), len(new)


def run(mpiexec, generate, flags, args):
    cmd = [mpiexec, "-n", "2", *flags, sys.executable, generate,
           "--max-new-tokens", str(NEW_TOKENS), *args]
    r = subprocess.run(cmd, capture_output=True, timeout=TIMEOUT, check=False)
    return r.returncode, r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")


def check_chats(d, model, eos, mpiexec, generate, flags):
    for system, user in ((None, "Hello! How are you?"),
                         ("Answer in French.", "Привет, мир 你好 😀 what is 2+2?")):
        messages = ([{"role": "system", "content": system}] if system else [])
        messages.append({"role": "user", "content": user})
        want, n = expected(d, model, eos, messages)
        args = ["--model", d, "--chat", user] + (["--system", system] if system else [])
        code, out, err = run(mpiexec, generate, flags, args)
        if code != 0:
            sys.exit(f"FAIL: generate.py --chat: exit {code}:\n{out}\n{err}")
        got = out[:-1] if out.endswith("\n") else out
        if got != want:
            sys.exit(f"FAIL: generate.py --chat {user!r} printed {got!r}; transformers {want!r}")
        print(f"{os.path.basename(d)}: chat {user!r}: the same answer ({n} tokens): {got!r}")


def check_eos_cut(d, model, mpiexec, generate, flags):
    """An answer ends at generation_config.json's end-of-sequence id: made the 6th greedy token
    (which the 5 before it are not), the answer is those 5 tokens."""
    messages = [{"role": "user", "content": "Hello! How are you?"}]
    tokenizer = transformers.AutoTokenizer.from_pretrained(d)
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                        return_dict=False)
    ids = list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "input_ids") else ids)
    new = []
    with torch.no_grad():
        for _ in range(NEW_TOKENS):
            new.append(int(model(torch.tensor([ids + new]), use_cache=False).logits[0, -1].argmax()))
    k = next((i for i in range(5, NEW_TOKENS) if new[i] not in new[:i]), None)
    if k is None:
        sys.exit(f"FAIL: no greedy token to make the end of sequence in {new}")
    path = os.path.join(d, "generation_config.json")
    with open(path) as f:
        gen = json.load(f)
    with open(path, "w") as f:
        json.dump(dict(gen, eos_token_id=[new[k], 10 ** 6]), f)  # a list, as Llama 3's
    want = tokenizer.decode(new[:k], skip_special_tokens=True)
    code, out, err = run(mpiexec, generate, flags, ["--model", d, "--chat", messages[0]["content"]])
    got = out[:-1] if out.endswith("\n") else out
    if code != 0 or got != want:
        sys.exit(f"FAIL: the answer cut at {new[k]}: exit {code}, printed {got!r}, wanted {want!r}"
                 f"\n{err}")
    print(f"the answer ends at the end-of-sequence id {new[k]}: {k} tokens, {got!r}")
    with open(path, "w") as f:
        json.dump(gen, f)


def check_text(d, model, mpiexec, generate, flags):
    """generate.py --text: each prompt's greedy text, in disco-demo --text's blocks."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(d)
    texts = ["Once upon a time", "Привет, мир 你好 😀"]
    blocks = []
    for t in texts:
        ids = tokenizer(t)["input_ids"]
        new = []
        with torch.no_grad():
            for _ in range(NEW_TOKENS):
                logits = model(torch.tensor([ids + new]), use_cache=False).logits[0, -1]
                new.append(int(logits.argmax()))
        blocks.append(tokenizer.decode(new, skip_special_tokens=False))
    want = "".join(f"--- text {i + 1} ---\n{b}\n" for i, b in enumerate(blocks))
    want += "--- end of text ---\n"
    code, out, err = run(mpiexec, generate, flags,
                         ["--model", d, "--text", texts[0], "--text", texts[1]])
    if code != 0 or out != want:
        sys.exit(f"FAIL: generate.py --text: exit {code}, printed {out!r}, wanted {want!r}\n{err}")
    print(f"generate.py --text: {len(texts)} prompts, the same text as transformers")


def check_bad(d, mpiexec, generate, flags):
    config_path = os.path.join(d, "tokenizer_config.json")
    with open(config_path) as f:
        config = json.load(f)
    cases = [
        (None, f"{d}: the checkpoint has no chat template"),
        ("{% for m in messages %}{{ m['content'] }", f"{config_path}: the chat template does "
         "not parse: line 1"),
        ("{{ raise_exception('only user and assistant roles') }}",
         f"{config_path}: the chat template failed: TemplateError: only user and assistant roles"),
        ("{{ messages.append(1) }}", f"{config_path}: the chat template does what the sandbox "
         "refuses"),
        ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
         f"{config_path}: the chat template does what the sandbox refuses: loops over more than"),
        ("{{ 'x' * 10000000000 }}", f"{config_path}: the chat template does what the sandbox "
         "refuses: a sequence of"),
        ("{{ 1 // 0 }}", f"{config_path}: the chat template failed: ZeroDivisionError"),
        ("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}",
         f"{config_path}: the chat template failed: RecursionError"),
    ]
    for template, line in cases:
        bad = dict(config)
        if template is None:
            bad.pop("chat_template")
        else:
            bad["chat_template"] = template
        with open(config_path, "w") as f:
            json.dump(bad, f)
        code, out, err = run(mpiexec, generate, flags, ["--model", d, "--chat", "hi"])
        lines = [x for x in err.splitlines() if "generate.py:" in x]
        if code == 0 or not lines or line not in lines[0]:
            sys.exit(f"FAIL: template {template!r}: exit {code}, wanted one line with "
                     f"{line!r}:\n{out}\n{err}")
        print(f"refused in one line: {lines[0]}")
    with open(config_path, "w") as f:
        json.dump(config, f)
    # A template file that would never end (a FIFO), tools in the Mistral v0.3 style, and
    # transformers' {% generation %} tag.
    jinja = os.path.join(d, "chat_template.jinja")
    os.mkfifo(jinja)
    code, out, err = run(mpiexec, generate, flags, ["--model", d, "--chat", "hi"])
    if code == 0 or f"{jinja}: not a regular file" not in err:
        sys.exit(f"FAIL: a FIFO as chat_template.jinja: exit {code}:\n{out}\n{err}")
    print(f"refused in one line: {jinja}: not a regular file")
    os.remove(jinja)
    sys.path.insert(0, os.environ.get("PYTHONPATH", "").split(":")[0])
    import disco.chat
    for template in ("{% if tools is not none %}T{% endif %}{{ messages[0]['content'] }}",
                     "{% generation %}{{ messages[0]['content'] }}{% endgeneration %}"):
        with open(jinja, "w") as f:
            f.write(template)
        tokenizer = transformers.AutoTokenizer.from_pretrained(d)
        msgs = [{"role": "user", "content": "hi"}]
        want = tokenizer.apply_chat_template(msgs, tokenize=False)
        got = disco.chat.render(d, msgs, add_generation_prompt=False)
        if got != want:
            sys.exit(f"FAIL: template {template!r}: disco.chat {got!r}, transformers {want!r}")
        print(f"template {template!r}: as transformers renders it ({got!r})")
    os.remove(jinja)


def main():
    mpiexec, generate, flags = sys.argv[1], sys.argv[2], sys.argv[3:]
    _, texts = ct.corpus()
    with tempfile.TemporaryDirectory(dir=os.environ.get("DISCO_TEST_SHARED_DIR")) as tmp:
        d = os.path.join(tmp, "chatml")
        os.makedirs(d)
        model, eos = make_checkpoint(d, texts)
        check_chats(d, model, eos, mpiexec, generate, flags)
        # The template in chat_template.jinja instead (transformers 4.43+ saves it there).
        j = os.path.join(tmp, "jinja")
        os.makedirs(j)
        for name in os.listdir(d):
            with open(os.path.join(d, name), "rb") as src, open(os.path.join(j, name), "wb") as dst:
                dst.write(src.read())
        with open(os.path.join(j, "tokenizer_config.json")) as f:
            config = json.load(f)
        config.pop("chat_template")
        with open(os.path.join(j, "tokenizer_config.json"), "w") as f:
            json.dump(config, f)
        with open(os.path.join(j, "chat_template.jinja"), "w") as f:
            f.write(TEMPLATE)
        check_chats(j, model, eos, mpiexec, generate, flags)
        check_eos_cut(d, model, mpiexec, generate, flags)
        check_text(d, model, mpiexec, generate, flags)
        check_bad(d, mpiexec, generate, flags)
    print("PASS")


if __name__ == "__main__":
    main()
