"""Greedy generation with disco-demo's Llama decoder, driven from Python.

The model is the C++ one of models/llama (libdisco_llama): this controller loads that library on
every worker (disco.load_library) and calls its worker functions by name, as disco-demo does; every
rank holds its tensor-parallel shards. Each decode step is a captured graph replayed as one frame
(--calls: call by call). It prints one line per prompt, as disco-demo does:

    generated: <the new token ids>

  mpirun -n 2 python3 examples/generate.py --model DIR --prompt 1,5,9 --prompt 4,2 \\
      --max-new-tokens 16 [--dtype bfloat16] [--calls] [--library PATH/libdisco_llama.so]
      [--dump-logits FILE.npy]
  mpirun -n 2 python3 examples/generate.py --model DIR --text "Once upon a time" [--text ...]
  mpirun -n 2 python3 examples/generate.py --model DIR --chat "What is MPI?" [--system "..."]

--text encodes each prompt with the checkpoint's own tokenizer (tokenizer.json or
tokenizer.model, disco.Tokenizer) and prints each generated text in a block, as disco-demo --text
does: `--- text 1 ---` ... `--- end of text ---`. --chat renders the message (after --system's,
if given) through the checkpoint's chat template (disco.chat: Jinja2, as transformers renders it),
generates until an end-of-sequence token (generation_config.json's eos_token_id) or
--max-new-tokens, and prints the answer without its special tokens.

--model is a Hugging Face checkpoint directory (config.json and safetensors) or an HDF5 file that
`disco-demo --convert` wrote. The library is found next to the libdisco this process loaded (the
build tree and installs alike), or given by --library or DISCO_LLAMA_LIBRARY. Every family
disco-demo reads (llama, mistral, qwen2, qwen3) works, from either kind of file. --dump-logits
writes float32 logits of shape (prompts, new tokens, vocab), as disco-demo's option does.
"""
import argparse
import json
import os
import sys

import numpy as np

import disco
import disco.chat


def find_library(explicit):
    """libdisco_llama.so: --library, DISCO_LLAMA_LIBRARY, else beside the loaded libdisco."""
    for path in (explicit, os.environ.get("DISCO_LLAMA_LIBRARY")):
        if path:
            return os.path.abspath(path)
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1] if len(line.split()) >= 6 else ""
            if os.path.basename(path).startswith("libdisco.so"):
                candidate = os.path.join(os.path.dirname(path), "libdisco_llama.so")
                if os.path.exists(candidate):
                    return candidate
    sys.exit("generate.py: libdisco_llama.so not found next to libdisco; pass --library")


def load_model(sess, fn, path, dtype):
    """The model on every worker, and its config."""
    if os.path.isdir(path):
        with open(os.path.join(path, "config.json")) as f:
            config = json.load(f)
        return fn("llama.open")(path, dtype), config
    text = sess.load_tensors(path, {"config.json": -1})["config.json"].debug_get_from_remote(0)
    config = json.loads(bytes(text).decode())
    model = fn("llama.new_model")(json.dumps(config), dtype)
    # Every weight the model reads, as the C++ loader derives it from the config (biases, q/k
    # norms, the LM head unless tied), with its shard axis: {name: 0 rows, 1 columns, -1 whole}.
    plan = json.loads(fn("llama.weight_plan")(model).debug_get_from_remote(0))
    for name, shard in sess.load_tensors(path, plan).items():
        fn("llama.set_weight")(model, name, shard)
    return model, config


def text_prompts(args):
    """(tokenizer, prompts as token ids, the ids that end an answer) for --text and --chat."""
    if not os.path.isdir(args.model):
        raise ValueError(f"--text and --chat need --model to be a checkpoint directory (its "
                         f"tokenizer), not {args.model}")
    vocab_size = disco.chat.read_json_object(os.path.join(args.model, "config.json")).get(
        "vocab_size")
    if not isinstance(vocab_size, int) or isinstance(vocab_size, bool) or vocab_size <= 0:
        raise ValueError(f"{args.model}/config.json: vocab_size {vocab_size!r} is not a "
                         "positive integer")
    tokenizer = disco.Tokenizer(args.model, vocab_size)
    if args.text:
        prompts = [tokenizer.encode(t) for t in args.text]
        for i, p in enumerate(prompts):
            if not p:
                raise ValueError(f"--text {i + 1} ({args.text[i]!r}) is no tokens: nothing to "
                                 "continue")
        return tokenizer, prompts, []
    messages = [{"role": "system", "content": args.system}] if args.system is not None else []
    messages.append({"role": "user", "content": args.chat})
    text = disco.chat.render(args.model, messages, add_generation_prompt=True)
    prompt = tokenizer.encode(text, add_special_tokens=False)  # the template wrote them
    if not prompt:
        raise ValueError(f"the chat template of {args.model} rendered no tokens")
    return tokenizer, [prompt], disco.chat.eos_token_ids(args.model)


def print_texts(tokenizer, rows, stop, chat):
    """Each prompt's generated text; a chat answer ends at its first end-of-sequence token."""
    if chat is not None:
        row = rows[0]
        ends = [i for i, t in enumerate(row) if t in stop]
        print(tokenizer.decode(row[:ends[0]] if ends else row, skip_special_tokens=True))
        return
    for i, row in enumerate(rows):
        print(f"--- text {i + 1} ---")
        print(tokenizer.decode(row))
    print("--- end of text ---")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    given = ap.add_mutually_exclusive_group(required=True)
    given.add_argument("--prompt", action="append",
                       help="token ids separated by commas; once per prompt")
    given.add_argument("--text", action="append", help="a prompt as text; once per prompt")
    given.add_argument("--chat", help="a user's message, through the chat template")
    ap.add_argument("--system", help="with --chat: a system message before it")
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "int8"],
                    help="int8: the linear layers' weights as llama.cpp's Q8_0, on the CPU")
    ap.add_argument("--kv-dtype", default="float32", choices=["float32", "float16"],
                    help="the KV cache's dtype (float16: half its bytes; the CPU)")
    ap.add_argument("--calls", action="store_true", help="decode steps call by call, not replays")
    ap.add_argument("--library", help="path of libdisco_llama.so")
    ap.add_argument("--dump-logits", metavar="FILE.npy",
                    help="write the logits that chose each token, (prompts, new tokens, vocab)")
    args = ap.parse_args()
    if args.system is not None and args.chat is None:
        ap.error("--system goes with --chat")
    steps = args.max_new_tokens
    library = find_library(args.library)

    def controller(sess):
        tokenizer, stop = None, []
        if args.prompt:
            prompts = [[int(t) for t in p.split(",")] for p in args.prompt]
        else:
            try:  # on rank 0 alone: a bad tokenizer or template is one line, once
                tokenizer, prompts, stop = text_prompts(args)
            except (ValueError, OSError) as e:  # ChatTemplateError is a ValueError
                print(f"generate.py: {e}", file=sys.stderr)
                return 1
        fn = sess.get_global_func
        fn("disco.load_library")(library)
        sess.init_ccl("mpi")
        model, config = load_model(sess, fn, args.model, args.dtype)
        sess.sync_all()  # a bad checkpoint is one error here
        # int64 arrays (a tuple would be a Shape, which crosses the wire with at most 64 entries)
        tokens = np.array([t for p in prompts for t in p], dtype=np.int64)
        lengths = np.array([len(p) for p in prompts], dtype=np.int64)
        state = fn("llama.new_state")(model, len(prompts), int(lengths.max()) + steps - 1,
                                      len(tokens), steps, bool(args.dump_logits), args.kv_dtype)
        sess.sync_all()
        embed, attention, mlp, head = (fn("llama." + n) for n in ("embed", "attention", "mlp",
                                                                   "head"))
        begin_decode = fn("llama.begin_decode")

        def forward():
            embed(state)
            for layer in range(config["num_hidden_layers"]):
                attention(state, layer)
                mlp(state, layer)
            head(state)

        fn("llama.begin_prefill")(state, tokens, lengths)  # every prompt with its own length
        forward()
        with sess.capture(num_inputs=1) as step:  # a decode step: its input is the step number
            begin_decode(state, step.inputs[0])
            forward()
        for k in range(1, steps):
            if args.calls:
                begin_decode(state, k)
                forward()
            else:
                step.replay(k)
        generated = fn("llama.tokens")(state).debug_get_from_remote(0)
        if tokenizer is None:
            for row in generated:
                print("generated:", " ".join(str(int(t)) for t in row))
        else:
            print_texts(tokenizer, [[int(t) for t in row] for row in generated], stop, args.chat)
        if args.dump_logits:
            # Each worker holds (steps, prompts, its vocabulary slice): the slices in rank order.
            local = fn("llama.logits")(state)
            parts = [np.asarray(local.debug_get_from_remote(w)) for w in range(sess.num_workers)]
            np.save(args.dump_logits, np.concatenate(parts, axis=2).transpose(1, 0, 2))
        return 0

    sys.exit(disco.main(controller))


if __name__ == "__main__":
    main()
