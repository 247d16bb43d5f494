#!/usr/bin/env python3
"""The decoder's slot mode (llama.begin_step), run by mpiexec under the Python package: a
sequence's logits are bit for bit the same alone (its prompt in chunks of 16, then one row a step:
doubled inside) and beside others (its prompt in other chunks, in a slot another sequence used
before, while other slots prefill and decode), in float32 and bfloat16; llama.begin_step's and
llama.set_sampling's refusals name what is wrong.

  check_slots.py MPIEXEC LIBDISCO_LLAMA [mpiexec flags...]     (runs itself at 1 and 2 ranks)
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

import disco

SLOTS, MAX_LEN, ROWS = 4, 64, 16
PROMPT = [(7 * i + 3) % 250 + 1 for i in range(20)]
OTHER = [(11 * i + 5) % 250 + 1 for i in range(30)]
NEW = 6


def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr)
    return 1


class Slots:
    def __init__(self, sess, fn, model, layers):
        self.sess, self.fn, self.layers = sess, fn, layers
        self.state = fn("llama.new_state")(model, SLOTS, MAX_LEN, ROWS, 1, True)

    def step(self, entries):
        """entries: (slot, position, tokens); returns each slot's (token, worker 0's logits)."""
        fn = self.fn
        arr = lambda v: np.array(v, dtype=np.int64)  # noqa: E731
        fn("llama.begin_step")(self.state, arr([e[0] for e in entries]),
                               arr([e[1] for e in entries]), arr([len(e[2]) for e in entries]),
                               arr([t for e in entries for t in e[2]]))
        fn("llama.embed")(self.state)
        for layer in range(self.layers):
            fn("llama.attention")(self.state, layer)
            fn("llama.mlp")(self.state, layer)
        fn("llama.head")(self.state)
        tokens = np.asarray(fn("llama.next_tokens")(self.state).debug_get_from_remote(0))
        logits = np.asarray(fn("llama.logits")(self.state).debug_get_from_remote(0))
        return {e[0]: (int(tokens[j]), logits[0, j].copy()) for j, e in enumerate(entries)}


def alone(s):
    """PROMPT in slot 2 alone: chunks of 16 and 4, then NEW - 1 decode steps of one row."""
    s.step([(2, 0, PROMPT[:16])])
    tok, logits = s.step([(2, 16, PROMPT[16:])])[2]
    out = [(tok, logits)]
    for k in range(NEW - 1):
        out.append(s.step([(2, len(PROMPT) + k, [out[-1][0]])])[2])
    return out


def beside(s):
    """Slot 2 first runs OTHER (30 positions), then PROMPT in chunks of 3, 9, 1 and 7 beside slot 0
    (OTHER's prefill, then decoding) and slot 3 (a prompt of 3, then decoding)."""
    s.step([(2, 0, OTHER[:16])])
    s.step([(2, 16, OTHER[16:])])
    s.step([(0, 0, OTHER[:12]), (2, 0, PROMPT[:3])])
    s.step([(2, 3, PROMPT[3:12]), (3, 0, [9, 8, 7]), (0, 12, OTHER[12:15])])
    r = s.step([(0, 15, OTHER[15:]), (2, 12, PROMPT[12:13])])
    r = s.step([(3, 3, [5]), (2, 13, PROMPT[13:])])
    out, last0 = [r[2]], 30
    r0 = s.step([(0, 30, [1])])
    for k in range(NEW - 1):
        r = s.step([(3, 4 + k, [2]), (0, last0 + 1 + k, [r0[0][0]]),
                    (2, len(PROMPT) + k, [out[-1][0]])])
        r0 = {0: r[0]}
        out.append(r[2])
    return out


def refusals(s):
    """Each bad step is one ValueError naming what is wrong."""
    cases = [
        (([5], [0], [1], [1]), "slot 5 is outside"),
        (([1, 1], [0, 0], [1, 1], [1, 2]), "listed twice"),
        (([1], [MAX_LEN - 1], [2], [1, 2]), "the KV cache holds"),
        (([1], [0], [ROWS + 1], [1] * (ROWS + 1)), "1 to max_rows, 16"),
        (([1, 2], [0, 0], [9, 9], [1] * 18), "at most 16"),
        (([1], [0], [2], [1]), "1 tokens for counts of 2"),
        (([1], [0], [1], [400]), "outside the vocabulary"),
        (([1], [0], [1, 1], [1]), "one of each per slot"),
        (([1], [2**62], [1], [1]), "the KV cache holds"),
    ]
    for args, words in cases:
        arrs = [np.array(a, dtype=np.int64) for a in args]
        s.fn("llama.begin_step")(s.state, *arrs)
        try:
            s.sess.sync_all()
        except disco.RemoteError as e:
            if words not in str(e) or "llama.begin_step" not in str(e):
                return f"{args}: {e}, expected '{words}'"
            continue
        return f"{args}: accepted"
    arr = lambda v, t=np.int64: np.array(v, dtype=t)  # noqa: E731
    s.fn("llama.begin_step")(s.state, arr([1]), arr([0]), arr([1]), arr([7]))
    for temps, seeds, tops, words in [([-1.0], [1], [1.0], "not a finite number >= 0"),
                                      ([float("nan")], [1], [1.0], "not a finite number >= 0"),
                                      ([1.0, 1.0], [1, 2], [1.0, 1.0],
                                       "one each per slot of the step (1)"),
                                      ([1.0], [1], [0.0], "top_p 0 of slot 1 is not in (0, 1]"),
                                      ([1.0], [1], [1.5], "is not in (0, 1]"),
                                      ([1.0], [1], [float("nan")], "is not in (0, 1]")]:
        s.fn("llama.set_sampling")(s.state, arr(temps, np.float32), arr(seeds),
                                   arr(tops, np.float32))
        try:
            s.sess.sync_all()
            return f"llama.set_sampling {temps}: accepted"
        except disco.RemoteError as e:
            if words not in str(e):
                return f"llama.set_sampling {temps}: {e}, expected '{words}'"
    s.fn("llama.next_tokens")(s.state)  # no step has reached the head
    try:
        s.sess.sync_all()
    except disco.RemoteError as e:
        if "no step has reached llama.head" in str(e):
            return None
        return f"llama.next_tokens before a step: {e}"
    return "llama.next_tokens before a step: accepted"


def run(model_dir, library):
    """The controller, on every rank (disco.main)."""

    def controller(sess):
        fn = sess.get_global_func
        fn("disco.load_library")(library)
        sess.init_ccl("mpi")
        for dtype in ("float32", "bfloat16"):
            model = fn("llama.open")(model_dir, dtype)
            layers = json.loads(fn("llama.config")(model).debug_get_from_remote(0))
            layers = int(layers["num_hidden_layers"])
            a = alone(Slots(sess, fn, model, layers))
            b = beside(Slots(sess, fn, model, layers))
            for k, ((ta, la), (tb, lb)) in enumerate(zip(a, b)):
                if ta != tb or not np.array_equal(la, lb):
                    return fail(f"{dtype}: token {k} alone {ta}, beside others {tb}; logits "
                                f"differ by up to {np.abs(la - lb).max()}")
            err = refusals(Slots(sess, fn, model, layers))
            if err:
                return fail(f"{dtype}: {err}")
        print(f"PASS: slot mode at {sess.num_workers} rank(s): a sequence's logits alone equal "
              "its logits beside others (float32, bfloat16); bad steps and sampling refused")
        return 0

    sys.exit(disco.main(controller))


def main():
    if sys.argv[1] == "--ranks":
        return run(*sys.argv[2:4])
    mpiexec, library, *flags = sys.argv[1:]
    here = os.path.dirname(os.path.abspath(__file__))
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "model")
        subprocess.run([sys.executable, os.path.join(here, "make_model.py"), model], check=True)
        for n in ("1", "2"):
            r = subprocess.run([mpiexec, "-n", n, *flags, sys.executable, os.path.abspath(__file__),
                                "--ranks", model, library], timeout=300, check=False)
            if r.returncode != 0:
                sys.exit(f"FAIL: check_slots.py at {n} rank(s): exit {r.returncode}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
