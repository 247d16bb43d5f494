#!/usr/bin/env python3
"""disco-llm-server with the official `openai` client (PyPI) and curl, at 2 ranks on the tiny
checkpoint of check_server.py: models; completions by ids (disco-demo's tokens) and by text,
whole and streamed; chat completions, whole and streamed, equal to the rendered prompt's
completion; the client's own errors for a wrong key and a refused field.

  check_openai.py MPIEXEC DISCO_LLM_SERVER DISCO_DEMO [mpiexec flags...]
"""
import json
import os
import signal
import subprocess
import sys
import tempfile

import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_server as cs  # noqa: E402  (the same directory)

fail = cs.fail


def check_completions(client, want):
    r = client.completions.create(model="model", prompt=cs.PROMPTS[0], max_tokens=cs.NEW,
                                  extra_body={"return_token_ids": True})
    ids = r.choices[0].model_extra.get("token_ids")
    if ids != want[0] or r.usage.completion_tokens != cs.NEW or r.choices[0].finish_reason != "length":
        fail(f"completion by ids: {r}")
    text = client.completions.create(model="model", prompt="hello world", max_tokens=cs.NEW)
    chunks = list(client.completions.create(model="model", prompt="hello world",
                                            max_tokens=cs.NEW, stream=True))
    if "".join(c.choices[0].text for c in chunks) != text.choices[0].text or \
            chunks[-1].choices[0].finish_reason != "length":
        fail(f"a streamed completion {chunks} is not the whole one {text}")


def check_chat(client):
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}]
    whole = client.chat.completions.create(model="model", messages=messages, max_tokens=cs.NEW)
    plain = client.completions.create(model="model", max_tokens=cs.NEW,
                                      prompt="<|system|>be brief\n<|user|>hello\n<|assistant|>")
    if whole.choices[0].message.content != plain.choices[0].text or \
            whole.choices[0].message.role != "assistant":
        fail(f"chat {whole} is not the rendered prompt's completion {plain}")
    stream = list(client.chat.completions.create(model="model", messages=messages,
                                                 max_tokens=cs.NEW, stream=True))
    joined = "".join(c.choices[0].delta.content or "" for c in stream)
    if joined != whole.choices[0].message.content or stream[0].choices[0].delta.role != "assistant":
        fail(f"a streamed chat {stream} is not the whole one {whole}")


def check_errors(port):
    bad = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="wrong", max_retries=0)
    try:
        bad.models.list()
        fail("a wrong key was taken")
    except openai.AuthenticationError:
        pass
    good = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=cs.KEY, max_retries=0)
    try:
        good.completions.create(model="model", prompt="x", max_tokens=1, logprobs=2)
        fail("logprobs was taken")
    except openai.BadRequestError as e:
        if "logprobs" not in str(e):
            fail(f"logprobs refused without naming it: {e}")


def check_curl(port):
    out = subprocess.run(
        ["curl", "-sS", "-N", "--max-time", str(cs.TIMEOUT), "-H", f"Authorization: Bearer {cs.KEY}",
         "-H", "Content-Type: application/json", f"http://127.0.0.1:{port}/v1/completions", "-d",
         json.dumps({"prompt": cs.PROMPTS[1], "max_tokens": 3, "stream": True})],
        capture_output=True, text=True, check=False)
    if out.returncode != 0 or not out.stdout.endswith("data: [DONE]\n\n"):
        fail(f"curl: exit {out.returncode}: {out.stdout!r} {out.stderr}")


def main():
    mpiexec, server, demo, *flags = sys.argv[1:]
    with tempfile.TemporaryDirectory() as tmp:
        model, key_file = cs.make_model(tmp)
        want = cs.demo_tokens(mpiexec, flags, demo, model)
        proc, port, lines, rest, reader = cs.start(mpiexec, flags, server, model, key_file)
        try:
            client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=cs.KEY,
                                   max_retries=0, timeout=cs.TIMEOUT)
            if [m.id for m in client.models.list()] != ["model"]:
                fail("models.list")
            check_completions(client, want)
            check_chat(client)
            check_errors(port)
            check_curl(port)
            for pid in cs.ranks_of(proc.pid, server):
                os.kill(pid, signal.SIGTERM)
            code = proc.wait(timeout=cs.TIMEOUT)
            reader.join(timeout=cs.TIMEOUT)
            if code != 0:
                fail(f"after SIGTERM: exit {code}:\n{''.join(lines + rest)}")
        finally:
            if proc.poll() is None:
                proc.kill()
    print(f"PASS: disco-llm-server with openai {openai.__version__} and curl: models, "
          "completions (ids, text, stream), chat (whole, stream), errors")


if __name__ == "__main__":
    main()
