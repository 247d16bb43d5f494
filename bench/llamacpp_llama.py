"""llama.cpp (through llama-cpp-python's ctypes binding) as a benchmark baseline: B sequences in
one context (a sequence id each), greedy, timed as the other baselines are.

Prefill is one llama_decode of every prompt's tokens (each its own sequence and positions, the
logits of each prompt's last token only); then each decode step is one llama_decode of B tokens.
The next token is numpy's argmax of the returned logits (as disco's and torch's argmax: the
first of equal maxima). The KV cache is float32 (type_k/type_v F32), as disco's and torch's, so
that the float32 token check compares the same arithmetic, or (kv="f16") llama.cpp's own default,
float16; flash attention is llama.cpp's default (auto). A fresh context per generation (created
outside the timed part) empties the cache.
"""

import ctypes
import sys
import time

import numpy as np

import llama_cpp as L

GGML_TYPE = {"f32": 0, "f16": 1}


def _quiet_log():
    """llama.cpp logs every load and context; keep its errors only (on stderr)."""
    @L.llama_log_callback
    def log(level, text, user_data):
        if level == getattr(L, "GGML_LOG_LEVEL_ERROR", 4):
            print(text.decode(errors="replace"), end="", file=sys.stderr, flush=True)
    L.llama_log_set(log, ctypes.c_void_p())
    return log


class LlamaCpp:
    def __init__(self, gguf_path, threads, max_batch, max_len, use_mmap=True, kv="f32"):
        self._log = _quiet_log()  # kept alive: llama.cpp calls it
        L.llama_backend_init()
        mp = L.llama_model_default_params()
        if not use_mmap:  # read into memory (where huge pages can back it), not mapped
            if hasattr(L, "LLAMA_LOAD_MODE_NONE"):  # llama-cpp-python 0.3.3x
                mp.load_mode = L.LLAMA_LOAD_MODE_NONE
            else:
                mp.use_mmap = False
        self.model = L.llama_model_load_from_file(gguf_path.encode(), mp)
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {gguf_path}")
        self.vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(self.model))
        self.threads, self.max_batch, self.max_len = threads, max_batch, max_len
        self.kv_type = GGML_TYPE[kv]
        self.ctx = None

    def _new_context(self, n_tokens):
        if self.ctx:
            L.llama_free(self.ctx)
        cp = L.llama_context_default_params()
        cp.n_seq_max = self.max_batch
        cp.n_ctx = self.max_batch * self.max_len
        cp.n_batch = cp.n_ubatch = max(n_tokens, self.max_batch)
        cp.n_threads = cp.n_threads_batch = self.threads
        cp.type_k = cp.type_v = self.kv_type
        self.ctx = L.llama_init_from_model(self.model, cp)
        if not self.ctx:
            raise RuntimeError("llama.cpp could not make a context")

    def _decode(self, batch, toks, pos, seqs, want):
        """One llama_decode of tokens toks at positions pos of sequences seqs; the logits
        (len(want) x vocab) of the rows `want` picks."""
        for i, (t, p, s) in enumerate(zip(toks, pos, seqs)):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = t, p, 1
            batch.seq_id[i][0] = s
            batch.logits[i] = 0
        for i in want:
            batch.logits[i] = 1
        batch.n_tokens = len(toks)
        rc = L.llama_decode(self.ctx, batch)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")
        out = np.empty((len(want), self.vocab), dtype=np.float32)
        for j, i in enumerate(want):
            out[j] = np.ctypeslib.as_array(L.llama_get_logits_ith(self.ctx, i), (self.vocab,))
        return out

    def generate(self, prompts, new_tokens, keep_logits=False):
        """(tokens, logits (B, new_tokens, V) or None, prefill seconds, decode seconds)."""
        B = len(prompts)
        n = sum(map(len, prompts))
        self._new_context(n)
        batch = L.llama_batch_init(max(n, B), 0, 1)
        try:
            toks = [t for p in prompts for t in p]
            pos = [i for p in prompts for i in range(len(p))]
            seqs = [b for b, p in enumerate(prompts) for _ in p]
            last = list(np.cumsum([len(p) for p in prompts]) - 1)
            rows = []
            t0 = time.perf_counter()
            logits = self._decode(batch, toks, pos, seqs, last)
            tok = logits.argmax(axis=1)
            out = [tok]
            rows.append(logits.copy() if keep_logits else None)
            t1 = time.perf_counter()
            at = [len(p) for p in prompts]
            for step in range(new_tokens - 1):
                logits = self._decode(batch, [int(t) for t in tok], [a + step for a in at],
                                      list(range(B)), list(range(B)))
                tok = logits.argmax(axis=1)
                out.append(tok)
                rows.append(logits.copy() if keep_logits else None)
            t2 = time.perf_counter()
        finally:
            L.llama_batch_free(batch)
        tokens = np.stack(out, axis=1).tolist()
        return tokens, (np.stack(rows, axis=1) if keep_logits else None), t1 - t0, t2 - t1

    def close(self):
        if self.ctx:
            L.llama_free(self.ctx)
            self.ctx = None
        if self.model:
            L.llama_model_free(self.model)
            self.model = None
