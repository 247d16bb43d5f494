#!/usr/bin/env python3
"""disco-llm-server end to end at 2 ranks, on a tiny checkpoint with a tokenizer (make_model.py):
completions by token ids and by text, whole and streamed, whose greedy tokens must equal
disco-demo --prompt's whatever else is in the batch; usage counts; stop strings; the errors
(malformed JSON, wrong types, too long, huge body, wrong or missing key, unknown route, wrong
method, sampling, what is not implemented); chat completions through the checkpoint's template;
refusals at start (a key file others can read, no tokenizer); the same tokens with a float16 KV
cache (--kv-dtype float16), where a request past float16's range fails alone; a client dropped
mid-stream, then another request served; SIGTERM during a stream: it ends whole, and exit 0.

  check_server.py MPIEXEC DISCO_LLM_SERVER DISCO_DEMO [mpiexec flags...]
"""
import http.client
import json
import os
import re
import resource
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TIMEOUT = 300  # against a hang only
KEY = "test-key-0123456789"
NEW = 6
PROMPTS = [[1, 5, 9], [4, 2], [7, 3, 11, 19, 2, 8, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13],
           [262, 259, 260, 261, 108, 100]]  # the last: "hello world" by make_model.py's tokenizer
MAX_LEN = 64
# The test model's chat template (written to its tokenizer_config.json): BOS, turns, and an
# exception for the role "bad".
CHAT_TEMPLATE = ("{{ bos_token }}{% for m in messages %}{% if m['role'] == 'bad' %}"
                 "{{ raise_exception('a bad role') }}{% endif %}<|{{ m['role'] }}|>"
                 "{{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}<|assistant|>"
                 "{% endif %}")


def fail(msg):
    sys.exit(f"FAIL: {msg}")


def demo_tokens(mpiexec, flags, demo, model, prompts=PROMPTS, new=NEW, ranks="2"):
    """disco-demo --prompt's greedy tokens of each prompt (its `generated:` lines)."""
    cmd = [mpiexec, "-n", ranks, *flags, demo, "--model", model, "--warmup", "0",
           "--max-new-tokens", str(new)]
    for p in prompts:
        cmd += ["--prompt", ",".join(map(str, p))]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, check=False)
    got = [list(map(int, line.split()[1:])) for line in r.stdout.splitlines()
           if line.startswith("generated:")]
    if r.returncode != 0 or len(got) != len(prompts):
        fail(f"disco-demo exit {r.returncode}:\n{r.stdout}\n{r.stderr}")
    return got


class Client:
    def __init__(self, port):
        self.port = port

    def request(self, method, path, body=None, key=KEY, raw=None):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=TIMEOUT)
        headers = {"Content-Type": "application/json"}
        if key is not None:
            headers["Authorization"] = f"Bearer {key}"
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        c.request(method, path, body=data, headers=headers)
        r = c.getresponse()
        text = r.read().decode("utf-8")
        c.close()
        return r.status, text

    def complete(self, body):
        status, text = self.request("POST", "/v1/completions", body)
        if status != 200:
            fail(f"{body}: HTTP {status}: {text}")
        return json.loads(text)

    def stream(self, body):
        """Returns (text, ids, finish_reason, usage) of a streamed completion."""
        status, text = self.request("POST", "/v1/completions", dict(body, stream=True))
        if status != 200:
            fail(f"{body}: HTTP {status}: {text}")
        events = [e[len("data: "):] for e in text.split("\n\n") if e]
        if events[-1] != "[DONE]" or any(not e for e in events):
            fail(f"stream does not end with data: [DONE]: {text!r}")
        chunks = [json.loads(e) for e in events[:-1]]
        out, ids = "", []
        for ch in chunks:
            out += ch["choices"][0]["text"]
            ids += ch["choices"][0].get("token_ids", [])
        return out, ids, chunks[-1]["choices"][0]["finish_reason"], chunks[-1].get("usage")


def expect_error(client, status, method, path, body=None, key=KEY, raw=None, words=""):
    got, text = client.request(method, path, body, key, raw)
    if got != status:
        fail(f"{method} {path} {body or raw!r}: HTTP {got}, expected {status}: {text}")
    err = json.loads(text).get("error", {})
    if not err.get("message") or not err.get("type") or words not in err["message"]:
        fail(f"{method} {path}: not OpenAI's error object with '{words}': {text}")


def check_tokens(client, want):
    """Every prompt at once (one batch), whole and streamed: disco-demo's tokens."""
    results = {}

    def one(i, stream):
        body = {"prompt": PROMPTS[i], "max_tokens": NEW, "return_token_ids": True}
        if stream:
            text, ids, finish, usage = client.stream(body)
        else:
            r = client.complete(body)
            c = r["choices"][0]
            text, ids, finish, usage = c["text"], c["token_ids"], c["finish_reason"], r["usage"]
        results[(i, stream)] = (text, ids, finish, usage)

    threads = [threading.Thread(target=one, args=(i, s)) for i in range(len(PROMPTS))
               for s in (False, True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for (i, stream), (text, ids, finish, usage) in sorted(results.items()):
        if ids != want[i]:
            fail(f"prompt {i} (stream {stream}): tokens {ids}, disco-demo's {want[i]}")
        if finish != "length" or usage != {"prompt_tokens": len(PROMPTS[i]),
                                           "completion_tokens": NEW,
                                           "total_tokens": len(PROMPTS[i]) + NEW}:
            fail(f"prompt {i} (stream {stream}): finish {finish}, usage {usage}")
        if text != results[(i, False)][0]:
            fail(f"prompt {i}: streamed text {text!r} is not the whole response's")
    return results


def check_text_and_stop(client, want, results):
    r = client.complete({"prompt": "hello world", "max_tokens": NEW, "return_token_ids": True})
    if r["choices"][0]["token_ids"] != want[3] or r["usage"]["prompt_tokens"] != 6:
        fail(f"the text prompt: {r}, expected the tokens {want[3]} of its 6 ids")
    # A stop string: the first printable ASCII token after the first that the text lacks before.
    text0, ids0 = results[(0, False)][0], want[0]
    k = next((k for k in range(1, NEW) if 33 <= ids0[k] < 127 and
              chr(ids0[k]) not in text0[:text0.index(chr(ids0[k]))]), None)
    if k is None:
        fail(f"no token in {ids0} fit for a stop string")
    stop = chr(ids0[k])
    body = {"prompt": PROMPTS[0], "max_tokens": NEW, "return_token_ids": True, "stop": [stop]}
    c = client.complete(body)["choices"][0]
    text, ids, finish, usage = client.stream(body)
    for got in [(c["text"], c["token_ids"], c["finish_reason"]), (text, ids, finish)]:
        if got != (text0.split(stop)[0], ids0[:k + 1], "stop"):
            fail(f"stop {stop!r}: {got}, expected {(text0.split(stop)[0], ids0[:k + 1], 'stop')}")
    if usage["completion_tokens"] != k + 1:
        fail(f"stop: usage {usage}")


def check_errors(client):
    expect_error(client, 400, "POST", "/v1/completions", raw="{\"prompt\": [1,", words="JSON")
    expect_error(client, 400, "POST", "/v1/completions", {"prompt": [1], "max_tokens": "8"},
                 words="max_tokens")
    expect_error(client, 400, "POST", "/v1/completions", {"prompt": {"a": 1}}, words="prompt")
    expect_error(client, 400, "POST", "/v1/completions", {"prompt": [1], "stream": 1},
                 words="stream")
    expect_error(client, 400, "POST", "/v1/completions", {"prompt": [1] * 60, "max_tokens": 10},
                 words="--max-len")
    expect_error(client, 400, "POST", "/v1/completions", {"prompt": [1, 320]}, words="320")
    expect_error(client, 400, "POST", "/v1/completions", {"prompt": [1], "temperature": 2.5},
                 words="temperature")
    expect_error(client, 400, "POST", "/v1/completions", {"prompt": [1], "temperature": "hot"},
                 words="temperature")
    for top_p in (0, 1.5, "most", -0.1):
        expect_error(client, 400, "POST", "/v1/completions", {"prompt": [1], "top_p": top_p},
                     words="top_p")
    expect_error(client, 400, "POST", "/v1/completions", {"prompt": [1], "seed": 1.5},
                 words="seed")
    expect_error(client, 401, "POST", "/v1/completions", {"prompt": [1]}, key="wrong")
    expect_error(client, 401, "GET", "/v1/models", key=None)
    expect_error(client, 404, "GET", "/v1/nothing", words="/v1/nothing")
    expect_error(client, 405, "GET", "/v1/completions", words="POST")
    # What would change the result and is not implemented: refused naming it, not ignored; the
    # neutral values clients send by default pass.
    for field, value in [("logprobs", 1), ("echo", True), ("suffix", "x"), ("best_of", 2),
                         ("presence_penalty", 0.5), ("frequency_penalty", -1),
                         ("logit_bias", {"5": 100}), ("repetition_penalty", 1.2),
                         ("min_tokens", 3)]:
        expect_error(client, 400, "POST", "/v1/completions",
                     {"prompt": [1], "max_tokens": 1, field: value}, words=field)
    client.complete({"prompt": [1], "max_tokens": 1, "echo": False, "suffix": "", "best_of": 1,
                     "presence_penalty": 0, "frequency_penalty": 0.0, "logit_bias": {},
                     "logprobs": None, "user": "u"})
    expect_error(client, 400, "POST", "/v1/completions",
                 raw='{"prompt": [1], "max_tokens": 99999999999999999999}', words="[1, ")
    # The scheme's case does not matter; a key is still needed.
    c = http.client.HTTPConnection("127.0.0.1", client.port, timeout=TIMEOUT)
    c.request("GET", "/v1/models", headers={"Authorization": f"bearer {KEY}"})
    if c.getresponse().status != 200:
        fail("Authorization: bearer KEY (lower case) refused")
    c.close()
    # A POST without a length; a chunked body past the limit (1 MiB): refused, not read whole.
    for head, body, code in [(b"", b"", b"411"),
                             (b"Transfer-Encoding: chunked\r\n",
                              b"".join(b"%x\r\n%s\r\n" % (65536, b" " * 65536)
                                       for _ in range(20)) + b"0\r\n\r\n", b"413")]:
        with socket.create_connection(("127.0.0.1", client.port), timeout=TIMEOUT) as s:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                      KEY.encode() + b"\r\n" + head + b"\r\n")
            try:
                s.sendall(body)
            except OSError:  # the server answered and closed before taking it all
                pass
            reply = s.recv(65536)
        if not reply.startswith(b"HTTP/1.1 " + code):
            fail(f"expected {code!r}: {reply[:300]!r}")
    # A body over the limit: refused from its Content-Length, before it is read.
    with socket.create_connection(("127.0.0.1", client.port), timeout=TIMEOUT) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                  b"Authorization: Bearer " + KEY.encode() +
                  b"\r\nContent-Length: 100000000\r\n\r\n{\"prompt\": [")
        reply = s.recv(65536).decode("utf-8", "replace")
    if not reply.startswith("HTTP/1.1 413"):
        fail(f"a huge body: {reply!r}")
    status, text = client.request("GET", "/health", key=None)
    models = json.loads(client.request("GET", "/v1/models")[1])
    if status != 200 or models["data"][0]["id"] != "model":
        fail(f"/health {status} {text}, /v1/models {models}")


def check_chat(client):
    """Chat completions: the template rendered by Jinja2, the prompt encoded as it wrote it (its
    BOS included): the same tokens as the rendered text sent as a completion (which gets BOS from
    the tokenizer); streamed deltas add up to the message; bad messages refused naming them."""
    messages = [{"role": "system", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "hello "},
                                             {"type": "text", "text": "world"}]}]
    status, text = client.request("POST", "/v1/chat/completions",
                                  {"messages": messages, "max_tokens": NEW,
                                   "return_token_ids": True})
    if status != 200:
        fail(f"chat: HTTP {status}: {text}")
    chat = json.loads(text)
    plain = client.complete({"prompt": "<|system|>be brief\n<|user|>hello world\n<|assistant|>",
                             "max_tokens": NEW, "return_token_ids": True})
    c, p = chat["choices"][0], plain["choices"][0]
    if (chat["object"] != "chat.completion" or c["message"]["role"] != "assistant" or
            c["token_ids"] != p["token_ids"] or c["message"]["content"] != p["text"] or
            chat["usage"] != plain["usage"]):
        fail(f"chat {chat} differs from the rendered prompt's completion {plain}")
    status, text = client.request("POST", "/v1/chat/completions",
                                  {"messages": messages, "max_tokens": NEW, "stream": True})
    events = [json.loads(e[len("data: "):]) for e in text.split("\n\n")
              if e and e != "data: [DONE]"]
    deltas = [e["choices"][0]["delta"] for e in events]
    if (status != 200 or not text.endswith("data: [DONE]\n\n") or
            deltas[0].get("role") != "assistant" or
            "".join(d.get("content", "") for d in deltas) != p["text"] or
            events[-1]["choices"][0]["finish_reason"] != "length"):
        fail(f"chat stream: HTTP {status}: {text!r}")
    for body, words in [({}, "messages"), ({"messages": []}, "messages"),
                        ({"messages": [{"content": "x"}]}, "messages[0].role"),
                        ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
                         "only text"),
                        ({"messages": messages, "tools": [{"type": "function"}]}, "tools"),
                        ({"messages": [{"role": "bad", "content": "x"}]}, "a bad role")]:
        expect_error(client, 400, "POST", "/v1/chat/completions", body, words=words)


def check_dropped(client, want):
    """A client that goes away after its first event; then the server still serves."""
    s, _ = open_stream(client.port, PROMPTS[1], 40)
    s.close()
    r = client.complete({"prompt": PROMPTS[2], "max_tokens": NEW, "return_token_ids": True})
    if r["choices"][0]["token_ids"] != want[2]:
        fail(f"after a dropped client: {r}")


def open_stream(port, prompt, max_tokens):
    """A streamed request on a raw socket, read up to its first event: then it is in a batch."""
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "stream": True,
                       "return_token_ids": True}).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
              b"Authorization: Bearer " + KEY.encode() + b"\r\nContent-Length: " +
              str(len(body)).encode() +
              b"\r\n\r\n" + body)
    got = b""
    while b"data: " not in got:
        got += s.recv(4096)
    return s, got


def read_to_end(s, got):
    while True:
        more = s.recv(65536)
        if not more:
            return got.decode("utf-8", "replace")
        got += more


def ranks_of(pid, server, strict=True):
    """The launcher's descendants that run the server: the ranks (under Open MPI its children,
    under MPICH's hydra a proxy's)."""
    ranks, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children", encoding="ascii") as f:
                    todo += [int(k) for k in f.read().split()]
            if p != pid and os.path.realpath(f"/proc/{p}/exe") == os.path.realpath(server):
                ranks.append(p)
        except FileNotFoundError:
            pass
    if strict and len(ranks) != 2:
        fail(f"the launcher {pid} runs the server as {ranks}, not as 2 ranks")
    return ranks


def check_startup_errors(mpiexec, flags, server, tmp, model):
    """Refusals at start, one line each naming the thing, and the job ends (exit not 0)."""
    open_key = os.path.join(tmp, "open-key")
    with open(open_key, "w", encoding="ascii") as f:
        f.write(KEY)
    os.chmod(open_key, 0o644)
    no_tok = os.path.join(tmp, "no-tokenizer")
    os.makedirs(no_tok)
    for name in ("config.json", "model.safetensors"):
        os.symlink(os.path.join(model, name), os.path.join(no_tok, name))
    nul_key = os.path.join(tmp, "nul-key")
    fd = os.open(nul_key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, b"a\0b\n")
    os.close(fd)
    for args, words in [(["--model", model, "--api-key-file", open_key], "chmod 600"),
                        (["--model", model, "--api-key-file", nul_key], "control byte (0x0)"),
                        (["--model", no_tok], "no tokenizer"),
                        (["--model", model, "--max-len", "100000"], "max_position_embeddings"),
                        (["--model", model, "--max-batch", "0"], "--max-batch"),
                        (["--model", model, "--max-len", "1"], "--max-len 1"),
                        (["--model", model, "--host", ""], "--host is empty")]:
        r = subprocess.run([mpiexec, "-n", "2", *flags, server, "--port", "0", *args],
                           capture_output=True, text=True, timeout=TIMEOUT, check=False)
        if r.returncode == 0 or words not in r.stderr:
            fail(f"{args}: exit {r.returncode}, expected a line with '{words}':\n{r.stderr}")


def check_stop_during_start(mpiexec, flags, server, tmp, model):
    """SIGTERM while the server starts (here: its chat renderer, a python3 that hangs, first on
    PATH) ends it at the start-up's next step: exit 0, said, the hung child gone."""
    fake = os.path.join(tmp, "fake-bin")
    os.makedirs(fake)
    with open(os.path.join(fake, "python3"), "w", encoding="ascii") as f:
        f.write("#!/bin/sh\nexec sleep 300\n")
    os.chmod(os.path.join(fake, "python3"), 0o755)
    # mpiexec by name: Open MPI's, run by its absolute path, puts its own directory (/usr/bin)
    # first on the ranks' PATH.
    env = dict(os.environ, PATH=f"{fake}:{os.path.dirname(mpiexec)}:{os.environ['PATH']}")
    proc = subprocess.Popen([os.path.basename(mpiexec), "-n", "2", *flags, server, "--model",
                             model, "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        sleeper = None
        for _ in range(1200):  # until rank 0 runs the hung renderer (120 s against a hang)
            ranks = ranks_of(proc.pid, server, strict=False)
            kids = [p for p in os.listdir("/proc") if p.isdigit() and children_of(p, ranks)]
            sleeper = next((p for p in kids if comm(p) == "sleep"), None)
            if sleeper or proc.poll() is not None:
                break
            time.sleep(0.1)
        if sleeper is None:
            fail(f"no hung renderer seen: {proc.poll()}")
        for pid in ranks:
            os.kill(pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=TIMEOUT)
        if proc.returncode != 0 or "stopped before listening" not in out:
            fail(f"SIGTERM during the start: exit {proc.returncode}:\n{out}")
        if os.path.exists(f"/proc/{sleeper}") and comm(sleeper) == "sleep":
            fail("the hung renderer outlived the server")
    finally:
        if proc.poll() is None:
            proc.kill()


def children_of(pid, parents):
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1]) in parents
    except (OSError, ValueError, IndexError):
        return False


def comm(pid):
    try:
        with open(f"/proc/{pid}/comm", encoding="ascii", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return ""


def launch(cmd, rest=None, host=r"127\.0\.0\.1"):
    """Runs a server command until it prints `listening on http://HOST:PORT` (HOST: the regular
    expression `host`): (proc, port, lines so far, the rest of its output as it comes into `rest`
    (a new list unless given), the thread reading it)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        m = re.match(rf"listening on http://{host}:(\d+)$", line.strip())
        if m:
            break
    else:
        fail(f"the server ended (exit {proc.wait()}) before listening:\n{''.join(lines)}")
    # The rest of its output, read as it comes (the pipe never fills).
    rest = [] if rest is None else rest
    reader = threading.Thread(target=lambda: rest.extend(proc.stdout), daemon=True)
    reader.start()
    return proc, int(m.group(1)), lines, rest, reader


def start(mpiexec, flags, server, model, key_file):
    return launch([mpiexec, "-n", "2", *flags, server, "--model", model, "--port", "0",
                   "--max-len", str(MAX_LEN), "--max-batch", "4", "--api-key-file", key_file])


def open_files_limit(pid):
    """(soft, hard) 'Max open files' of process `pid`, as strings."""
    with open(f"/proc/{pid}/limits", encoding="ascii") as f:
        for line in f:
            if line.startswith("Max open files"):
                return tuple(line.split()[3:5])
    return None


def terminate(proc, server, lines, rest, reader, what):
    """SIGTERM to every rank of a launched server (as scancel does), which must then exit 0."""
    for pid in ranks_of(proc.pid, server):
        os.kill(pid, signal.SIGTERM)
    if proc.wait(timeout=TIMEOUT) != 0:
        fail(f"{what}: after SIGTERM, exit {proc.returncode}:\n{''.join(lines + rest)}")
    reader.join(timeout=TIMEOUT)


def check_ipv6_and_open_files(mpiexec, flags, server, model):
    """--host ::1: the address printed as a URL has it ([::1]), and it answers there. Started with
    a soft open-file limit of 1024, the server raises it to the hard one (a connection is a
    descriptor, idle ones included)."""
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
        host, want = ["--host", "::1"], r"\[::1\]"
    except OSError as e:
        print(f"check_server: no IPv6 loopback here ({e}): --host ::1 not tried")
        host, want = [], r"127\.0\.0\.1"
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    low = min(soft, 1024)
    resource.setrlimit(resource.RLIMIT_NOFILE, (low, hard))
    try:
        proc, port, lines, rest, reader = launch(
            [mpiexec, "-n", "2", *flags, server, "--model", model, "--port", "0", *host],
            host=want)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    try:
        # Rank 0, which serves HTTP, raised its own.
        limits = [open_files_limit(pid) for pid in ranks_of(proc.pid, server)]
        if low < hard and not any(lim is not None and lim[0] == lim[1] for lim in limits):
            fail(f"the ranks' open-file limits stayed {limits} (started at soft {low})")
        if not host:
            for pid in ranks_of(proc.pid, server):
                os.kill(pid, signal.SIGTERM)
            proc.wait(timeout=TIMEOUT)
            return
    except BaseException:
        proc.kill()
        raise
    try:
        with socket.create_connection(("::1", port), timeout=TIMEOUT) as c:
            c.sendall(b"GET /health HTTP/1.1\r\nHost: [::1]\r\nConnection: close\r\n\r\n")
            answer = b""
            while chunk := c.recv(4096):
                answer += chunk
        if not answer.startswith(b"HTTP/1.1 200") or b'"ok"' not in answer:
            fail(f"GET /health over [::1]: {answer!r}")
        terminate(proc, server, lines, rest, reader, "--host ::1")
    finally:
        if proc.poll() is None:
            proc.kill()


def check_kv16(mpiexec, flags, server, model, key_file, want):
    """--kv-dtype float16: the start-up line names it, and greedy tokens are disco-demo's (float32
    cache) on the test model."""
    proc, port, lines, rest, reader = launch(
        [mpiexec, "-n", "2", *flags, server, "--model", model, "--port", "0", "--max-len",
         str(MAX_LEN), "--max-batch", "4", "--api-key-file", key_file, "--kv-dtype", "float16"])
    try:
        if not any("kv cache float16" in line for line in lines):
            fail(f"--kv-dtype float16 not in the start-up lines:\n{''.join(lines)}")
        check_tokens(Client(port), want)
        terminate(proc, server, lines, rest, reader, "--kv-dtype float16")
    finally:
        if proc.poll() is None:
            proc.kill()


def overflow_model(tmp, model):
    """A copy of the test model in which token 300 alone makes a layer-0 value (kv head 3's, rank
    1's at 2 ranks) of about 70000, past float16's range: its embedding is one component, which
    the norm (weight 1 there) makes sqrt(hidden) exactly, where any other token's is smaller."""
    import numpy as np
    out = os.path.join(tmp, "overflow")
    shutil.copytree(model, out)
    path = os.path.join(out, "model.safetensors")
    with open(path, "rb") as f:
        raw = bytearray(f.read())
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    with open(os.path.join(out, "config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    h, hd = cfg["hidden_size"], cfg["head_dim"]

    def tensor(name):
        e = header[name]
        assert e["dtype"] == "F32", e
        a, b = (8 + n + x for x in e["data_offsets"])
        return np.frombuffer(raw, np.float32, (b - a) // 4, a).reshape(e["shape"])

    tensor("model.embed_tokens.weight")[300] = 0
    tensor("model.embed_tokens.weight")[300, 0] = 1024
    tensor("model.layers.0.input_layernorm.weight")[0] = 1
    tensor("model.layers.0.self_attn.v_proj.weight")[3 * hd + 5, 0] = 70000 / np.sqrt(h)
    with open(path, "wb") as f:
        f.write(raw)
    return out


def check_kv16_overflow(mpiexec, flags, server, tmp, model, key_file):
    """--kv-dtype float16: a request whose values pass float16's range fails alone (400, saying
    so), and the requests decoded beside it get the tokens they get alone."""
    proc, port, lines, rest, reader = launch(
        [mpiexec, "-n", "2", *flags, server, "--model", overflow_model(tmp, model), "--port", "0",
         "--max-len", str(MAX_LEN), "--max-batch", "4", "--api-key-file", key_file,
         "--kv-dtype", "float16"])
    try:
        client = Client(port)
        body = lambda p: {"prompt": p, "max_tokens": NEW, "return_token_ids": True}  # noqa: E731
        alone = [client.complete(body(p))["choices"][0]["token_ids"] for p in PROMPTS[:3]]
        got = {}

        def one(i, p):
            got[i] = client.request("POST", "/v1/completions", body(p))

        threads = [threading.Thread(target=one, args=(i, p))
                   for i, p in enumerate(PROMPTS[:3] + [[1, 300, 2]])]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        status, text = got[3]
        if status != 400 or "pass float16's range" not in text:
            fail(f"the request past float16's range: HTTP {status}: {text}")
        for i in range(3):
            status, text = got[i]
            if status != 200 or json.loads(text)["choices"][0]["token_ids"] != alone[i]:
                fail(f"prompt {i} beside a request past float16's range: HTTP {status}: {text} "
                     f"(alone: {alone[i]})")
        # Streamed, it fails before its first token: its status, not 200 and an error event.
        status, text = client.request("POST", "/v1/completions", dict(body([1, 300, 2]),
                                                                      stream=True))
        if status != 400 or "pass float16's range" not in text or "data:" in text:
            fail(f"the streamed request past float16's range: HTTP {status}: {text}")
        if client.stream(body(PROMPTS[1]))[1] != alone[1]:
            fail("a stream after the one past float16's range: other tokens")
        terminate(proc, server, lines, rest, reader, "past float16's range")
    finally:
        if proc.poll() is None:
            proc.kill()


def make_model(tmp):
    """The test checkpoint (with CHAT_TEMPLATE) and a key file in `tmp`: (model, key_file)."""
    model = os.path.join(tmp, "model")
    subprocess.run([sys.executable, os.path.join(HERE, "make_model.py"), model], check=True)
    with open(os.path.join(model, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"bos_token": "<s>", "chat_template": CHAT_TEMPLATE}, f)
    key_file = os.path.join(tmp, "key")
    fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, (KEY + "\n").encode())
    os.close(fd)
    return model, key_file


def main():
    mpiexec, server, demo, *flags = sys.argv[1:]
    with tempfile.TemporaryDirectory() as tmp:
        model, key_file = make_model(tmp)
        want = demo_tokens(mpiexec, flags, demo, model)
        check_startup_errors(mpiexec, flags, server, tmp, model)
        check_stop_during_start(mpiexec, flags, server, tmp, model)
        check_ipv6_and_open_files(mpiexec, flags, server, model)
        check_kv16(mpiexec, flags, server, model, key_file, want)
        check_kv16_overflow(mpiexec, flags, server, tmp, model, key_file)
        proc, port, lines, rest, reader = start(mpiexec, flags, server, model, key_file)
        try:
            client = Client(port)
            results = check_tokens(client, want)
            check_text_and_stop(client, want, results)
            check_errors(client)
            check_chat(client)
            check_dropped(client, want)
            # As scancel and srun do: every rank gets SIGTERM (Open MPI's mpirun, given SIGTERM
            # itself, forwards it and the ranks stop as cleanly, but it exits 1 on its own). A
            # request in the running batch then still gets all its tokens.
            s, got = open_stream(port, PROMPTS[2], 40)
            for pid in ranks_of(proc.pid, server):
                os.kill(pid, signal.SIGTERM)
            text = read_to_end(s, got)
            s.close()
            ids = [i for m in re.findall(r'"token_ids":\[([0-9,]*)\]', text)
                   for i in m.split(",") if i]
            if len(ids) != 40 or '"finish_reason":"length"' not in text or \
                    "data: [DONE]" not in text or ids[:NEW] != list(map(str, want[2])):
                fail(f"the running request after SIGTERM: {text!r}")
            code = proc.wait(timeout=TIMEOUT)
            reader.join(timeout=TIMEOUT)
            if code != 0 or not any("stopped" in line for line in rest):
                fail(f"after SIGTERM: exit {code}:\n{''.join(lines + rest)}")
        finally:
            if proc.poll() is None:
                proc.kill()
    print("PASS: disco-llm-server: tokens equal disco-demo's, stream, stop, errors, a dropped "
          "client, SIGTERM")


if __name__ == "__main__":
    main()
