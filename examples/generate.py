"""Greedy generation with disco-demo's Llama decoder, driven from Python.

The model is the C++ one of models/llama (libdisco_llama): this controller loads that library on
every worker (disco.load_library) and calls its worker functions by name, as disco-demo does; every
rank holds its tensor-parallel shards. Each decode step is a captured graph replayed as one frame
(--calls: call by call). It prints one line per prompt, as disco-demo does:

    generated: <the new token ids>

  mpirun -n 2 python3 examples/generate.py --model DIR --prompt 1,5,9 --prompt 4,2 \\
      --max-new-tokens 16 [--dtype bfloat16] [--calls] [--library PATH/libdisco_llama.so]

--model is a Hugging Face checkpoint directory (config.json and safetensors) or an HDF5 file that
`disco-demo --convert` wrote. The library is found next to the libdisco this process loaded (the
build tree and installs alike), or given by --library or DISCO_LLAMA_LIBRARY.
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


def weight_plan(config):
    """Every weight's Hugging Face name and its shard axis (Megatron: q/k/v, gate/up, embedding and
    LM head by rows, o and down by columns, norms whole)."""
    plan = {"model.embed_tokens.weight": 0, "model.norm.weight": -1}
    for layer in range(config["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        plan.update({p + "input_layernorm.weight": -1, p + "post_attention_layernorm.weight": -1,
                     p + "self_attn.q_proj.weight": 0, p + "self_attn.k_proj.weight": 0,
                     p + "self_attn.v_proj.weight": 0, p + "self_attn.o_proj.weight": 1,
                     p + "mlp.gate_proj.weight": 0, p + "mlp.up_proj.weight": 0,
                     p + "mlp.down_proj.weight": 1})
    if not config.get("tie_word_embeddings", False):
        plan["lm_head.weight"] = 0
    return plan


def load_model(sess, fn, path, dtype):
    """The model on every worker, and its config."""
    if os.path.isdir(path):
        with open(os.path.join(path, "config.json")) as f:
            config = json.load(f)
        return fn("llama.open")(path, dtype), config
    text = sess.load_tensors(path, {"config.json": -1})["config.json"].debug_get_from_remote(0)
    config = json.loads(bytes(text).decode())
    model = fn("llama.new_model")(json.dumps(config), dtype)
    for name, shard in sess.load_tensors(path, weight_plan(config)).items():
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
                                      len(tokens), steps, False)
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
        return 0

    sys.exit(disco.main(controller))


if __name__ == "__main__":
    main()
