"""bench/decode_vs_torch.py: its PyTorch baseline generates what the NumPy reference generates
(so the benchmark compares against a correct model), and its disco path runs against
fake_disco_demo.py.

    /usr/bin/python3 -m pytest -q tests/llama/test_bench.py
"""

import json
import os
import shutil
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))
pytest.importorskip("torch")
import decode_vs_torch as bench  # noqa: E402
import make_checkpoint as mc  # noqa: E402
import reference as ref  # noqa: E402

SMALL = ["--hidden", "64", "--layers", "2", "--heads", "4", "--kv-heads", "2", "--ffn", "128",
         "--vocab", "256"]


@pytest.mark.parametrize("spec,dtype", [
    (dict(hidden=64, layers=2, heads=4, kv_heads=2, ffn=128, vocab=256, seed=1), "float32"),
    (dict(hidden=96, layers=3, heads=8, kv_heads=2, ffn=160, vocab=384, seed=2, dtype="float16",
          shards=2, tie_embeddings=True), "float32"),
    (dict(hidden=64, layers=2, heads=4, kv_heads=4, ffn=192, vocab=320, seed=3,
          rope_theta=500000.0, rms_norm_eps=1e-6), "bfloat16"),
])
def test_torch_baseline_matches_reference(tmp_path, spec, dtype):
    mc.make_checkpoint(str(tmp_path), **spec)
    prompts = [[1, 5, 9, 3, 7, 100, 200, 17, 42, 8, 8, 8, 8], [4, 2], [250, 3, 3, 3, 3], [9] * 7]
    toks, logits = ref.generate(str(tmp_path), prompts, 20, dtype)
    cfg, W = bench.load_hf_checkpoint(str(tmp_path), dtype)
    for threads in (1, 2):
        bench.set_threads(threads)
        model = bench.TorchLlama(cfg, W, len(prompts), 64)
        btoks, blogits, tp, td = model.generate(prompts, 20, keep_logits=True)
        assert btoks == toks
        err = np.abs(blogits - logits).max()
        assert err <= 1e-5 * max(1.0, np.abs(logits).max()), err
        assert tp > 0 and td > 0
    bench.set_threads(1)


def test_parse_demo_lines():
    out = ("generated: 1 2 3\ngenerated: 4 5 6\nprefill: 1234.5 tokens/s\n"
           "decode: 98.25 tokens/s\n"
           "runtime share of a decode step: 1.75% (by replay; 3.1% by calls)\n"
           "kv cache per rank: 1.50 MiB\nweights per rank: 237.7 MiB\n"
           "peak rss per rank (MiB): 400 380\n")
    r = bench.parse_demo(out)
    assert r["tokens"] == [[1, 2, 3], [4, 5, 6]]
    assert (r["prefill"], r["decode"], r["share"]) == (1234.5, 98.25, 1.75)
    assert (r["kv_mib"], r["weights_mib"], r["rss_mib"]) == (1.5, 237.7, [400.0, 380.0])


def test_torch_only_and_with_a_fake_disco(tmp_path, capsys):
    assert bench.main(["--torch-only", "--repeats", "2", "--new-tokens", "4", "--cache",
                       str(tmp_path / "cache"), "--json", str(tmp_path / "t.json")] + SMALL) == 0
    out = capsys.readouterr().out
    assert "torch 1 thread " in out and "torch 2 threads" in out and "(not measured)" in out
    j = json.load(open(tmp_path / "t.json"))
    assert j["medians"]["torch 1t"]["decode"] > 0
    assert j["ratios"]["disco 1 rank / torch 1 thread"]["decode"] is None
    mpiexec = shutil.which("mpirun") or shutil.which("mpiexec")
    if mpiexec is None:
        pytest.skip("no mpiexec")
    fake = tmp_path / "disco-demo"
    fake.write_text(f'#!/bin/sh\nexec {sys.executable} {HERE}/fake_disco_demo.py "$@"\n')
    fake.chmod(0o755)
    assert bench.main(["--demo", str(fake), "--mpiexec", mpiexec, "--mpiexec-flag=--oversubscribe",
                       "--repeats", "1", "--new-tokens", "4", "--cache", str(tmp_path / "cache"),
                       "--json", str(tmp_path / "d.json")] + SMALL) == 0
    out = capsys.readouterr().out
    assert "disco 2 ranks" in out and "tokens = torch's" in out and "DIFFER" not in out, out
    j = json.load(open(tmp_path / "d.json"))
    assert j["medians"]["disco 2r"]["share"] == 1.3
    assert j["ratios"]["disco 2 ranks / disco 1 rank"]["decode"] > 0
