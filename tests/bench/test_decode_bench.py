"""bench/decode_bench.py's pure parts, on made-up figures (no torch, no llama.cpp, no MPI):
the refusal of a ratio against a baseline slower at 2 threads than at 1, the bounds, the token
check's wording, the busy machine, and the GGUF q/k permutation (rotate_half's rotary embedding
on Hugging Face rows equals llama.cpp's pairwise one on the permuted rows).

    /usr/bin/python3 -m pytest -q tests/bench
"""

import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))
import checkpoint  # noqa: E402
import decode_bench  # noqa: E402
import gguf_export  # noqa: E402
import machine  # noqa: E402
import report  # noqa: E402

CFG = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
           num_key_value_heads=2, vocab_size=512)


def row(who, n, decode, prefill, batch=1, dtype="float32"):
    return dict(model="tiny", dtype=dtype, batch=batch, who=who, n=n, decode=[decode],
                prefill=[prefill])


def figures(torch2_decode, torch2_prefill=900.0):
    rows = report.medians([row("disco", 1, 100.0, 1000.0), row("disco", 2, 190.0, 1900.0),
                           row("torch", 1, 50.0, 800.0),
                           row("torch", 2, torch2_decode, torch2_prefill)])
    refusals = report.scaling_refusals(rows)
    return {(r["n"], r["against"], r["metric"]): r for r in report.ratios(rows, refusals)}


def test_ratio_refused_where_2_threads_are_slower_than_1():
    r = figures(torch2_decode=40.0, torch2_prefill=700.0)
    assert r[(2, "torch", "decode")]["ratio"] is None
    assert "torch 2 threads (40.0) is slower than its 1 thread (50.0)" in \
        r[(2, "torch", "decode")]["why"]
    assert r[(2, "torch", "prefill")]["ratio"] is None
    assert r[(1, "torch", "decode")]["ratio"] == pytest.approx(2.0)  # 1 thread: no refusal
    table = "\n".join(report.ratio_table(list(r.values())))
    assert "refused: torch 2 threads (40.0) is slower" in table


def test_ratio_given_where_2_threads_are_faster():
    r = figures(torch2_decode=95.0)
    assert r[(2, "torch", "decode")]["ratio"] == pytest.approx(2.0)
    assert r[(2, "torch", "decode")]["why"] is None
    assert r[(2, "torch", "prefill")]["ratio"] == pytest.approx(1900.0 / 900.0)


def test_excluded_baseline_gets_no_ratio():
    rows = report.medians([row("disco", 1, 100.0, 1000.0)])
    rows.append(dict(model="tiny", dtype="float32", batch=1, who="llama.cpp", n=1,
                     excluded="float32 tokens differ from disco's (sequence 0, token 3)"))
    (dec, pre) = report.ratios(rows, report.scaling_refusals(rows))
    assert dec["ratio"] is None and "tokens differ" in dec["why"]
    assert "tokens differ" in "\n".join(report.table(rows))


def test_disco_kernel_rows_are_disco_but_not_the_ratios():
    """--disco-kernels avx2,auto: a disco row per kernel set, ranks not threads, never a baseline
    of the ratios and never refused as one; the ratios are auto's ("disco")."""
    a = decode_bench.parse_args(["--disco-kernels", "avx2,auto", "--ranks", "1,2"])
    assert decode_bench.configs(a, [], "float32") == [("disco avx2", 1), ("disco avx2", 2),
                                                      ("disco", 1), ("disco", 2)]
    assert report.label("disco avx2", 2) == "disco avx2 2 ranks"
    rows = report.medians([row("disco", 1, 100.0, 1000.0), row("disco avx2", 1, 80.0, 900.0),
                           row("disco avx2", 2, 70.0, 800.0), row("torch", 1, 50.0, 800.0)])
    assert report.scaling_refusals(rows) == {}
    rs = report.ratios(rows, {})
    assert {r["against"] for r in rs} == {"torch"} and all(r["n"] == 1 for r in rs)
    assert {r["ratio"] for r in rs if r["metric"] == "decode"} == {2.0}


def test_bounds():
    machine_figures = {"bandwidth": {1: {"read": 10.0}}, "sgemm": {1: {"gflops": 50.0}}}
    r = report.medians([row("disco", 1, 1000.0, 10000.0, batch=4)])[0]
    report.bounds(r, CFG, machine_figures)
    wbytes = checkpoint.weight_bytes_per_token(CFG, 4.0)
    assert r["decode_bound"] == pytest.approx(4 * 10e9 / wbytes)
    assert r["decode_of_bound"] == pytest.approx(1000.0 / r["decode_bound"])
    assert r["prefill_of_peak"] == pytest.approx(10000.0 * 2 * wbytes / 4 / 1e9 / 50.0)
    assert r["decode_of_beside"] is None  # no read beside it: no fraction, "-" in the table
    r2 = report.medians([dict(row("disco", 2, 1000.0, 10000.0, batch=4),
                              read_beside=[8.0, 5.0, 20.0])])[0]
    report.bounds(r2, CFG, {"bandwidth": {2: {"read": 16.0}}})
    assert r2["decode_bound_beside"] == pytest.approx(4 * 8e9 / wbytes)  # the median, 8 GB/s
    assert r2["decode_of_beside"] == pytest.approx(1000.0 / r2["decode_bound_beside"])
    line = report.table([r2])[2]
    assert f"| {100 * r2['decode_of_bound']:.0f}% | {100 * r2['decode_of_beside']:.0f}% |" in line
    h, f, v = 64, 128, 512
    assert wbytes == 4 * (2 * (64 * 16 * (4 + 4) + 64 * 64 + 3 * h * f) + h * v)
    # A step reads the sequences' keys and values too: 2 layers x (k, v) x 2 kv heads x 16.
    assert checkpoint.kv_bytes_per_position(CFG, 4) == 2 * 2 * 2 * 16 * 4
    kv = 4 * 1000 * checkpoint.kv_bytes_per_position(CFG, 4)  # 4 sequences at 1000 positions
    r3 = report.medians([dict(row("disco", 1, 1000.0, 10000.0, batch=4), kv_bytes=kv)])[0]
    report.bounds(r3, CFG, machine_figures)
    assert r3["decode_bound"] == pytest.approx(4 * 10e9 / (wbytes + kv))
    assert r3["decode_of_bound"] > r["decode_of_bound"]  # the same speed, more bytes a step


def test_first_difference_and_prompts():
    assert decode_bench.first_difference([[1, 2], [3, 4]], [[1, 2], [3, 4]]) is None
    assert decode_bench.first_difference([[1, 2], [3, 4]], [[1, 2], [3, 5]]) == \
        "sequence 1, token 1: 5 where disco made 4"
    p = decode_bench.make_prompts(4, 512)
    assert [len(x) for x in p] == [16, 32, 48, 64] and all(3 <= t < 512 for x in p for t in x)
    assert [len(x) for x in decode_bench.make_prompts(1, 512)] == [32]
    assert [len(x) for x in decode_bench.make_prompts(1, 512, 300)] == [300]
    assert [len(x) for x in decode_bench.make_prompts(3, 512, 100)] == [50, 125, 200]


def test_prompts_past_the_models_positions_are_refused(tmp_path, monkeypatch):
    d = tmp_path / "model"
    d.mkdir()
    (d / "config.json").write_text('{"vocab_size": 512, "max_position_embeddings": 100}')
    monkeypatch.setattr(checkpoint, "model_dir", lambda cache, name, sizes: str(d))
    a = decode_bench.parse_args(["--models", "tiny", "--batches", "1,2", "--prompt-len", "40",
                                 "--new-tokens", "30"])
    with pytest.raises(SystemExit, match=r"--prompt-len 40: prompts of up to 80 tokens .*"
                                         r"30 new tokens pass model tiny's 100 positions"):
        decode_bench.run_grid(a, {}, {})


def test_busy_machine_is_named():
    quiet = {"spinners": [0.99, 0.97], "loadavg_before": 0.2, "cpus": 2}
    assert machine.busy_reasons(quiet) == []
    why = machine.busy_reasons({"spinners": [0.5, 0.5], "loadavg_before": 3.0, "cpus": 2})
    assert any("did not each get a core" in w for w in why)
    assert any("load average 3.00" in w for w in why)
    # The load average after the run counts the benchmark's own ranks: not judged.
    assert machine.busy_reasons(dict(quiet, loadavg=1.8)) == []


def rope_hf(x, pos, theta=10000.0):
    """Hugging Face's rotary embedding of one head's row x (rotate_half)."""
    d = x.shape[-1]
    inv = 1.0 / theta ** (np.arange(0, d, 2) / d)
    c, s = np.cos(pos * inv), np.sin(pos * inv)
    c, s = np.concatenate([c, c]), np.concatenate([s, s])
    return x * c + np.concatenate([-x[d // 2:], x[:d // 2]]) * s


def rope_pairs(x, pos, theta=10000.0):
    """llama.cpp's (rope type normal): each pair (x[2i], x[2i+1]) rotated by pos * inv[i]."""
    d = x.shape[-1]
    inv = 1.0 / theta ** (np.arange(0, d, 2) / d)
    c, s = np.cos(pos * inv), np.sin(pos * inv)
    out = x.copy()
    out[0::2] = x[0::2] * c - x[1::2] * s
    out[1::2] = x[0::2] * s + x[1::2] * c
    return out


@pytest.mark.parametrize("heads,kv_heads", [(4, 4), (4, 2), (8, 1)])
def test_gguf_permutation_turns_rotate_half_into_pairs(heads, kv_heads):
    rng = np.random.default_rng(0)
    hd, hidden = 8, 32
    for n, w in ((heads, rng.standard_normal((heads * hd, hidden))),
                 (kv_heads, rng.standard_normal((kv_heads * hd, hidden)))):
        x = rng.standard_normal(hidden)
        pw = gguf_export.permute(w, heads, n)
        for pos in (0, 3, 17):
            for h in range(n):
                hf = rope_hf(w[h * hd:(h + 1) * hd] @ x, pos)
                gg = rope_pairs(pw[h * hd:(h + 1) * hd] @ x, pos)
                # The same rotated values, in llama.cpp's order: pairs interleave the halves.
                np.testing.assert_allclose(gg[0::2], hf[:hd // 2], atol=1e-12)
                np.testing.assert_allclose(gg[1::2], hf[hd // 2:], atol=1e-12)


def test_gguf_tensors_names_and_vocab_floor():
    W = {"model.embed_tokens.weight": np.zeros((512, 64)), "model.norm.weight": np.ones(64),
         "lm_head.weight": np.zeros((512, 64))}
    for i in range(2):
        p = f"model.layers.{i}."
        for k, shape in (("input_layernorm", (64,)), ("post_attention_layernorm", (64,)),
                         ("self_attn.q_proj", (64, 64)), ("self_attn.k_proj", (32, 64)),
                         ("self_attn.v_proj", (32, 64)), ("self_attn.o_proj", (64, 64)),
                         ("mlp.gate_proj", (128, 64)), ("mlp.up_proj", (128, 64)),
                         ("mlp.down_proj", (64, 128))):
            W[p + k + ".weight"] = np.zeros(shape)
    names = [n for n, _ in gguf_export.gguf_tensors(CFG, W)]
    assert names[0] == "token_embd.weight" and names[-1] == "output.weight"
    assert "blk.1.attn_k.weight" in names and "blk.0.ffn_down.weight" in names
    assert len(names) == 3 + 2 * 9
    with pytest.raises(SystemExit, match="at least 259"):
        gguf_export.add_vocab(None, None, 256)


def test_huge_pages_tunable_is_added_once():
    t = machine.HUGE_PAGES_TUNABLE
    assert machine.with_huge_pages({})["GLIBC_TUNABLES"] == t
    assert machine.with_huge_pages({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"})[
        "GLIBC_TUNABLES"] == "glibc.malloc.arena_max=2:" + t
    assert machine.with_huge_pages({"GLIBC_TUNABLES": t})["GLIBC_TUNABLES"] == t
