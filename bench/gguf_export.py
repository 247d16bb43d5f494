"""A Hugging Face Llama checkpoint (bench/checkpoint.py) as a GGUF file for llama.cpp, written
with the `gguf` package's writer, so that llama.cpp runs the very weights disco runs.

    python3 bench/gguf_export.py CHECKPOINT_DIR OUT.gguf [--type f32|bf16|q8_0]

What llama.cpp's convert_hf_to_gguf.py does for LlamaForCausalLM (its conversion/llama.py):
- q_proj and k_proj rows permuted from Hugging Face's rotate_half layout (each head's first half
  then its second half) to llama.cpp's pairs (reshape (heads, 2, head_dim/2, in), swap axes 1
  and 2); k with the kv heads' count;
- Hugging Face names to GGUF's (token_embd, blk.N.attn_q, ..., output_norm, output);
- 1-D tensors (the norms) stay float32 in every type; the matrices in the file's type (bf16:
  round to nearest even, as disco rounds; q8_0: gguf's quantizer).
The checkpoints are random and have no tokenizer: the GGUF carries a stand-in SentencePiece
("llama") vocabulary of vocab_size tokens (<unk> <s> </s>, the 256 byte tokens llama.cpp looks
up, then t<N>), so token ids pass through unchanged; the benchmark never tokenizes text.
"""

import argparse
import os
import sys

import numpy as np

import checkpoint

TYPES = ("f32", "bf16", "q8_0")


def permute(w, n_head, n_head_kv=None):
    """convert_hf_to_gguf.py's LlamaModel.permute: rotate_half's layout to llama.cpp's pairs."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def gguf_tensors(cfg, W):
    """[(GGUF name, float32 array)] in llama.cpp's layout."""
    H, KV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    names = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q",
             "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    out = [("token_embd.weight", W["model.embed_tokens.weight"])]
    for i in range(cfg["num_hidden_layers"]):
        for hf, gg in names.items():
            w = W[f"model.layers.{i}.{hf}.weight"]
            if hf == "self_attn.q_proj":
                w = permute(w, H, H)
            elif hf == "self_attn.k_proj":
                w = permute(w, H, KV)
            out.append((f"blk.{i}.{gg}.weight", w))
    out.append(("output_norm.weight", W["model.norm.weight"]))
    if "lm_head.weight" in W and not cfg.get("tie_word_embeddings", False):
        out.append(("output.weight", W["lm_head.weight"]))
    return out


def add_vocab(writer, gguf, vocab):
    """The stand-in SentencePiece vocabulary (see the module's doc)."""
    if vocab < 3 + 256:
        raise SystemExit(f"a GGUF for llama.cpp needs a vocabulary of at least 259 tokens (the "
                         f"byte tokens), not {vocab}")
    T = gguf.TokenType
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [T.UNKNOWN, T.CONTROL, T.CONTROL] + [T.BYTE] * 256
    tokens += [f"t{i}" for i in range(len(tokens), vocab)]
    types += [T.NORMAL] * (vocab - len(types))
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * vocab)
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)


def add_params(writer, cfg, ftype):
    h, H = cfg["hidden_size"], cfg["num_attention_heads"]
    hd = cfg.get("head_dim") or h // H
    writer.add_context_length(int(cfg.get("max_position_embeddings", 4096)))
    writer.add_embedding_length(h)
    writer.add_block_count(cfg["num_hidden_layers"])
    writer.add_feed_forward_length(cfg["intermediate_size"])
    writer.add_head_count(H)
    writer.add_head_count_kv(cfg["num_key_value_heads"])
    writer.add_key_length(hd)
    writer.add_value_length(hd)
    writer.add_rope_dimension_count(hd)
    writer.add_rope_freq_base(float(cfg.get("rope_theta", 10000.0)))
    writer.add_layer_norm_rms_eps(float(cfg.get("rms_norm_eps", 1e-6)))
    writer.add_vocab_size(cfg["vocab_size"])
    writer.add_file_type(ftype)


def write_gguf(cfg, W, path, qtype="f32"):
    """Writes the GGUF of (cfg, W) to path (through path.tmp, renamed when complete)."""
    import gguf
    Q = gguf.GGMLQuantizationType
    ftype, mtype = {"f32": (gguf.LlamaFileType.ALL_F32, Q.F32),
                    "bf16": (gguf.LlamaFileType.MOSTLY_BF16, Q.BF16),
                    "q8_0": (gguf.LlamaFileType.MOSTLY_Q8_0, Q.Q8_0)}[qtype]
    tmp = path + ".tmp"
    writer = gguf.GGUFWriter(tmp, "llama")
    add_params(writer, cfg, ftype)
    add_vocab(writer, gguf, cfg["vocab_size"])
    for name, w in gguf_tensors(cfg, W):
        w = np.ascontiguousarray(w, dtype=np.float32)
        if w.ndim == 1 or mtype == Q.F32:
            writer.add_tensor(name, w)
        else:
            writer.add_tensor(name, gguf.quants.quantize(w, mtype), raw_dtype=mtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(tmp, path)
    return path


def gguf_for(model_dir, qtype):
    """The GGUF of checkpoint `model_dir` in `qtype`, written next to it once."""
    path = os.path.join(model_dir, f"model-{qtype}.gguf")
    if not os.path.exists(path):
        cfg, W = checkpoint.load(model_dir)
        print(f"writing {path} ...", flush=True)
        write_gguf(cfg, W, path, qtype)
    return path


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("checkpoint")
    p.add_argument("out")
    p.add_argument("--type", choices=TYPES, default="f32")
    a = p.parse_args(argv)
    cfg, W = checkpoint.load(a.checkpoint)
    write_gguf(cfg, W, a.out, a.type)
    return 0


if __name__ == "__main__":
    sys.exit(main())
