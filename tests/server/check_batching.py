#!/usr/bin/env python3
"""disco-llm-server's continuous batching at N ranks, on make_model.py's tiny checkpoint.

Requests of many prompt lengths (some longer than a pass of 16 rows: chunked prefill) and output
lengths arrive while others decode, each started when an earlier one has streamed some tokens
(events, never clocks); every one's greedy tokens must equal its run alone on the same server
(exactly: a row's products do not depend on the batch) and disco-demo --prompt's. With
--max-batch 2: a request sent while a long one decodes gets its first token before the long one
ends (static batching would hold it back), and a client that goes away frees its slot for the
next request while the other slot's request still runs. With --max-batch 18: a step of more than
16 decoding rows (two passes); seeded sampling gives a seed's tokens whatever else runs.

  check_batching.py MPIEXEC DISCO_LLM_SERVER DISCO_DEMO RANKS [mpiexec flags...]
"""
import http.client
import json
import os
import re
import random
import subprocess
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_server  # noqa: E402  (the same directory)

HERE = os.path.dirname(os.path.abspath(__file__))
TIMEOUT = 300  # against a hang only
MAX_LEN = 128
LONG = 100  # the long requests' max_tokens


def fail(msg):
    sys.exit(f"FAIL: {msg}")


def make_requests():
    """(prompt, max_tokens) pairs from a fixed seed: prompts of 1 to 40 tokens."""
    rng = random.Random(38)
    lengths = [3, 40, 1, 17, 9, 33, 2, 25, 16, 5, 12, 31, 7, 20, 4, 28, 11, 1, 36, 6]
    return [([rng.randrange(1, 300) for _ in range(n)], rng.randrange(1, 40)) for n in lengths]


REQUESTS = make_requests()
LONG_PROMPT = [5, 17, 9, 200, 3]
SHORT_PROMPT = list(range(30, 50))  # 20 tokens: two chunks beside a decoding row
PROMPTS_SAMPLED = [3, 1, 4, 1, 5, 9, 2, 6]


class Log:
    """Events of every stream in the order the client saw them."""

    def __init__(self):
        self.lock = threading.Lock()
        self.events = []

    def add(self, event):
        with self.lock:
            self.events.append(event)

    def index(self, event):
        with self.lock:
            if event not in self.events:
                fail(f"no event {event} in {self.events}")
            return self.events.index(event)


class Stream(threading.Thread):
    """One streamed completion read as it comes: its token ids, its finish reason; `at` maps a
    count of tokens to a callback run when that many have come; `drop_after`: the client goes
    away after that many tokens."""

    def __init__(self, port, name, prompt, max_tokens, log, at=None, drop_after=None):
        super().__init__(daemon=True)
        self.port, self.name, self.log = port, name, log
        self.body = {"prompt": prompt, "max_tokens": max_tokens, "stream": True,
                     "return_token_ids": True}
        self.at = dict(at or {})
        self.drop_after = drop_after
        self.ids, self.finish, self.error = [], None, None

    def run(self):
        try:
            self.read()
        except Exception as e:  # pylint: disable=broad-except
            self.error = repr(e)

    def read(self):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=TIMEOUT)
        c.request("POST", "/v1/completions", body=json.dumps(self.body),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            self.error = f"HTTP {r.status}: {r.read()!r}"
            return
        while True:
            line = r.readline()
            if not line:
                self.error = f"the stream ended without [DONE] after {self.ids}"
                return
            line = line.decode("utf-8").strip()
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                self.log.add((self.name, "end"))
                c.close()
                return
            choice = json.loads(line[len("data: "):])["choices"][0]
            for i in choice.get("token_ids", []):
                self.ids.append(i)
                if len(self.ids) == 1:
                    self.log.add((self.name, "first"))
                if len(self.ids) in self.at:
                    self.at.pop(len(self.ids))()
            self.finish = choice["finish_reason"] or self.finish
            if self.drop_after is not None and len(self.ids) >= self.drop_after:
                self.log.add((self.name, "dropped"))
                c.sock.close()
                c.close()
                return


def finish_all(streams):
    for s in streams:
        s.join(TIMEOUT)
        if s.is_alive() or s.error:
            fail(f"{s.name}: {s.error or 'still running'}")


def check_against(name, ids, finish, max_tokens, want):
    """The tokens are want's first ones: all max_tokens, or up to an end of sequence."""
    if ids != want[:len(ids)] or not ids or (len(ids) < max_tokens and finish != "stop"):
        fail(f"{name}: tokens {ids} (finish {finish}), expected {want[:max_tokens]}")


def solo(port, prompt, max_tokens):
    s = Stream(port, "solo", prompt, max_tokens, Log())
    s.run()
    if s.error:
        fail(f"alone {prompt}: {s.error}")
    return s.ids, s.finish


def staggered(port, demo):
    """REQUESTS started in waves: each wave when the previous one's first stream has 2 tokens."""
    log = Log()
    streams = [Stream(port, f"r{i}", p, n, log) for i, (p, n) in enumerate(REQUESTS)]
    waves = [streams[0:1], streams[1:4], streams[4:9], streams[9:]]
    for w, nxt in zip(waves, waves[1:]):
        w[0].at[2] = lambda nxt=nxt: [s.start() for s in nxt]
        if w[0].body["max_tokens"] < 2:
            fail("a wave's first request must stream at least 2 tokens")
    for s in waves[0]:
        s.start()
    for w in waves:  # a wave starts from its predecessor's thread; join in order
        w[0].join(TIMEOUT)
        if 2 in w[0].at:  # it ended before its second token: start the next wave now
            w[0].at.pop(2)()
    finish_all(streams)
    for i, s in enumerate(streams):
        check_against(s.name, s.ids, s.finish, REQUESTS[i][1], demo[i])
    return streams


# The orderings below race the clients' threads against the server's steps: a loaded machine can
# hold a client thread past the whole long request. So each is tried up to ATTEMPTS times and
# fails when none shows it; a server that admits only between batches fails every attempt.
ATTEMPTS = 3


def joins_while_running(port, demo_long, demo_short):
    """A request sent while a long one decodes streams its first token before the long one ends."""
    for _ in range(ATTEMPTS):
        log = Log()
        short = Stream(port, "short", SHORT_PROMPT, 4, log)
        long_ = Stream(port, "long", LONG_PROMPT, LONG, log, at={3: short.start})
        long_.start()
        long_.join(TIMEOUT)
        finish_all([long_, short])
        check_against("long", long_.ids, long_.finish, LONG, demo_long)
        check_against("short", short.ids, short.finish, 4, demo_short)
        if log.index(("short", "first")) < log.index(("long", "end")):
            return
    fail(f"the short request began after the long one ended, {ATTEMPTS} times: {log.events}")


def dropped_free_slots(port, demo_long, demo_short):
    """--max-batch 2: two long requests fill the slots; one client goes away; a third request
    then runs and ends while the other long one still decodes; the second goes away too, and a
    fourth request still completes."""
    for attempt in range(ATTEMPTS):
        log = Log()
        third = Stream(port, "third", SHORT_PROMPT, 4, log)
        first = Stream(port, "first", LONG_PROMPT, LONG, log, drop_after=2)
        second = Stream(port, "second", LONG_PROMPT, LONG, log,
                        at={2: first.start, 4: third.start})
        second.start()
        second.join(TIMEOUT)
        finish_all([first, second, third])
        check_against("third", third.ids, third.finish, 4, demo_short)
        check_against("second", second.ids, second.finish, LONG, demo_long)
        if log.index(("first", "dropped")) < log.index(("third", "end")) < \
                log.index(("second", "end")):
            break
        if attempt == ATTEMPTS - 1:
            fail(f"a dropped client's slot was not freed for the next request, {ATTEMPTS} "
                 f"times: {log.events}")
    drop = Stream(port, "drop", LONG_PROMPT, LONG, log, drop_after=1)
    drop.run()
    ids, finish = solo(port, SHORT_PROMPT, 4)
    check_against("after two dropped clients", ids, finish, 4, demo_short)


def sampled(port, demo):
    """Seeded sampling: a seed's tokens alone equal its tokens beside greedy requests (started
    together); another seed draws others; temperature 0 with a seed is greedy; no seed works."""
    body = lambda seed, t=0.9: (PROMPTS_SAMPLED, 24, t, seed)  # noqa: E731
    alone_ids = sample_once(port, *body(42))
    log = Log()
    streams = [Stream(port, f"s{i}", p, n, log) for i, (p, n) in enumerate(REQUESTS[:3])]
    streams.append(Stream(port, "sampled", PROMPTS_SAMPLED, 24, log))
    streams[-1].body.update(temperature=0.9, seed=42)
    for s in streams:
        s.start()
    finish_all(streams)
    if streams[-1].ids != alone_ids:
        fail(f"seed 42: alone {alone_ids}, beside others {streams[-1].ids}")
    for i, s in enumerate(streams[:-1]):
        check_against(s.name, s.ids, s.finish, REQUESTS[i][1], demo[i])
    if sample_once(port, *body(43)) == alone_ids:
        fail(f"seeds 42 and 43 drew the same {alone_ids}")
    greedy = sample_once(port, *body(42, 0))
    if greedy != demo[len(REQUESTS) + 2][:len(greedy)]:
        fail(f"temperature 0 with a seed: {greedy}, greedy {demo[len(REQUESTS) + 2]}")
    sample_once(port, PROMPTS_SAMPLED, 4, 1.0, None)
    nucleus(port, demo, alone_ids)


def nucleus(port, demo, full_ids):
    """top_p: a nucleus of the single likeliest token is greedy at any temperature (and so are
    temperatures below 1e-5); a seed's tokens under top_p 0.5 alone equal its tokens beside greedy
    requests, and differ from the whole vocabulary's draws at some step (the test model's
    distributions are flat)."""
    # A nucleus below float's least normal (1e-300 as a double) or a temperature below 1e-5 is
    # greedy too, never a failed step (a top_p that rounded to 0 once failed every request in it).
    for temperature, top_p in ((2.0, 1e-6), (2.0, 1e-300), (1e-40, None), (1e-38, 1e-300)):
        tiny = sample_once(port, PROMPTS_SAMPLED, 24, temperature, 7, top_p=top_p)
        if tiny != demo[len(REQUESTS) + 2][:len(tiny)]:
            fail(f"temperature {temperature}, top_p {top_p}: {tiny}, greedy "
                 f"{demo[len(REQUESTS) + 2]}")
    alone = sample_once(port, PROMPTS_SAMPLED, 24, 0.9, 42, top_p=0.5)
    log = Log()
    streams = [Stream(port, f"n{i}", p, n, log) for i, (p, n) in enumerate(REQUESTS[:3])]
    streams.append(Stream(port, "nucleus", PROMPTS_SAMPLED, 24, log))
    streams[-1].body.update(temperature=0.9, seed=42, top_p=0.5)
    for s in streams:
        s.start()
    finish_all(streams)
    if streams[-1].ids != alone:
        fail(f"top_p 0.5, seed 42: alone {alone}, beside others {streams[-1].ids}")
    if alone == full_ids:
        fail(f"top_p 0.5 drew what the whole vocabulary drew: {alone}")


def sample_once(port, prompt, max_tokens, temperature, seed, top_p=None):
    s = Stream(port, "sampled", prompt, max_tokens, Log())
    s.body["temperature"] = temperature
    if top_p is not None:
        s.body["top_p"] = top_p
    if seed is not None:
        s.body["seed"] = seed
    s.run()
    if s.error or not s.ids:
        fail(f"temperature {temperature}, seed {seed}: {s.error or 'no tokens'}")
    return s.ids


def start(mpiexec, ranks, flags, server, model, max_batch):
    lines = []  # its whole output, read as it comes
    proc, port, head, _, reader = check_server.launch(
        [mpiexec, "-n", ranks, *flags, server, "--model", model, "--port", "0", "--max-len",
         str(MAX_LEN), "--max-batch", str(max_batch)], rest=lines)
    lines[:0] = head
    return proc, port, lines, reader


def stop(proc, lines, reader):
    """SIGTERM to the launcher, which forwards it (Open MPI's then exits 1 of its own accord)."""
    proc.terminate()
    code = proc.wait(timeout=TIMEOUT)
    reader.join(TIMEOUT)
    if code != 0 and not any("stopped" in line for line in lines):
        fail(f"the server did not stop cleanly: exit {code}:\n{''.join(lines)}")


def refused_kv_cache(mpiexec, ranks, flags, server, model, tmp):
    """A KV cache larger than the machine: one line naming the flags, before listening (the
    checkpoint made for 2^20 positions, which --max-len may not pass)."""
    big = os.path.join(tmp, "long-context")
    os.makedirs(big)
    for name in os.listdir(model):
        if name != "config.json":
            os.symlink(os.path.join(model, name), os.path.join(big, name))
    with open(os.path.join(model, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    config["max_position_embeddings"] = 1 << 20
    with open(os.path.join(big, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f)
    r = subprocess.run([mpiexec, "-n", ranks, *flags, server, "--model", big, "--port", "0",
                        "--max-batch", "256", "--max-len", str(1 << 20)],
                       capture_output=True, text=True, timeout=TIMEOUT, check=False)
    # One line in the server's flags: no rank prefix twice, no other worker's copy of it.
    want = (r"^disco-llm-server: \[rank 0/\d+ [^]]+\] --max-batch 256 x --max-len 1048576 "
            r"\(kv cache float32\) needs [0-9.]+ GiB per worker, .* it can give \(.*\); lower "
            r"--max-batch or --max-len, or give --kv-dtype float16 \(half the bytes\)$")
    if (r.returncode == 0 or not re.search(want, r.stderr, re.M) or r.stderr.count("[rank") != 1
            or "listening" in r.stdout):
        fail(f"a KV cache past the memory: exit {r.returncode}:\n{r.stdout}\n{r.stderr}")


def main():
    mpiexec, server, demo, ranks, *flags = sys.argv[1:]
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "model")
        # Larger than server.completions' model: a step takes long enough (milliseconds) that a
        # request sent at a long one's third token reaches the server well before its end.
        subprocess.run([sys.executable, os.path.join(HERE, "make_model.py"), model, "--hidden",
                        "512", "--layers", "4", "--ffn", "1536"], check=True)
        prompts = [p for p, _ in REQUESTS] + [LONG_PROMPT, SHORT_PROMPT, PROMPTS_SAMPLED]
        want = check_server.demo_tokens(mpiexec, flags, demo, model, prompts, LONG, ranks)
        demo_long, demo_short = want[-3], want[-2]
        refused_kv_cache(mpiexec, ranks, flags, server, model, tmp)
        proc, port, lines, reader = start(mpiexec, ranks, flags, server, model, 2)
        try:
            joins_while_running(port, demo_long, demo_short)
            dropped_free_slots(port, demo_long, demo_short)
            staggered(port, want)
        finally:
            stop(proc, lines, reader)
        proc, port, lines, reader = start(mpiexec, ranks, flags, server, model, 18)
        try:
            streams = staggered(port, want)
            sampled(port, want)
            for i, s in enumerate(streams):
                alone = solo(port, *REQUESTS[i])
                if alone != (s.ids, s.finish):
                    fail(f"{s.name}: batched {s.ids} ({s.finish}), alone {alone}")
        finally:
            stop(proc, lines, reader)
    print(f"PASS: disco-llm-server at {ranks} rank(s): {len(REQUESTS)} staggered requests equal "
          "their runs alone and disco-demo's; a request joins a running one; dropped clients "
          "free their slots")


if __name__ == "__main__":
    main()
