"""Greedy generation with disco-demo's Llama decoder, driven from Python.

The model is the C++ one of models/llama (libdisco_llama): this controller loads that library on
every worker (disco.load_library) and calls its worker functions by name, as disco-demo does; every
rank holds its tensor-parallel shards. Each decode step is a captured graph replayed as one frame
(--calls: call by call). It prints one line per prompt, as disco-demo does:

    generated: <the new token ids>

  mpirun -n 2 python3 examples/generate.py --model DIR --prompt 1,5,9 --prompt 4,2 \\
      --max-new-tokens 16 [--dtype bfloat16] [--calls] [--library PATH/libdisco_llama.so]
      [--dump-logits FILE.npy]

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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt", action="append", required=True,
                    help="token ids separated by commas; once per prompt")
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--calls", action="store_true", help="decode steps call by call, not replays")
    ap.add_argument("--library", help="path of libdisco_llama.so")
    ap.add_argument("--dump-logits", metavar="FILE.npy",
                    help="write the logits that chose each token, (prompts, new tokens, vocab)")
    args = ap.parse_args()
    prompts = [[int(t) for t in p.split(",")] for p in args.prompt]
    steps = args.max_new_tokens
    library = find_library(args.library)

    def controller(sess):
        fn = sess.get_global_func
        fn("disco.load_library")(library)
        sess.init_ccl("mpi")
        model, config = load_model(sess, fn, args.model, args.dtype)
        sess.sync_all()  # a bad checkpoint is one error here
        # int64 arrays (a tuple would be a Shape, which crosses the wire with at most 64 entries)
        tokens = np.array([t for p in prompts for t in p], dtype=np.int64)
        lengths = np.array([len(p) for p in prompts], dtype=np.int64)
        state = fn("llama.new_state")(model, len(prompts), int(lengths.max()) + steps - 1,
                                      len(tokens), steps, bool(args.dump_logits))
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
        for row in generated:
            print("generated:", " ".join(str(int(t)) for t in row))
        if args.dump_logits:
            # Each worker holds (steps, prompts, its vocabulary slice): the slices in rank order.
            local = fn("llama.logits")(state)
            parts = [np.asarray(local.debug_get_from_remote(w)) for w in range(sess.num_workers)]
            np.save(args.dump_logits, np.concatenate(parts, axis=2).transpose(1, 0, 2))
        return 0

    sys.exit(disco.main(controller))


if __name__ == "__main__":
    main()
