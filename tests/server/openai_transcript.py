#!/usr/bin/env python3
"""The official `openai` client against a running disco-llm-server, printing what it sends and
what comes back (the transcript of docs/serve-llm.md): the models, a completion whole and
streamed (the same text), and a chat completion streamed. Exit 0 when every answer has the shape
OpenAI's clients expect and the streamed texts equal the whole ones; 1 otherwise.

  openai_transcript.py URL                the server at URL (http://127.0.0.1:PORT)
  openai_transcript.py --make-model DIR   writes check_server.py's test checkpoint (with its chat
                                          template) to DIR/model, for a server to load
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def fail(msg):
    print(f"FAIL: {msg}", flush=True)
    sys.exit(1)


def transcript(url):
    import openai
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", timeout=60, max_retries=0)
    print(f"$ client.models.list()  # {url}")
    models = [m.id for m in client.models.list()]
    print(f"  {models}")
    if len(models) != 1:
        fail(f"one model expected, not {models}")
    prompt, n = "The cluster", 16
    print(f"$ client.completions.create(model={models[0]!r}, prompt={prompt!r}, max_tokens={n})")
    whole = client.completions.create(model=models[0], prompt=prompt, max_tokens=n)
    print(f"  text={whole.choices[0].text!r} finish_reason={whole.choices[0].finish_reason} "
          f"usage={whole.usage.prompt_tokens}+{whole.usage.completion_tokens}")
    print("$ the same with stream=True:")
    pieces = []
    for chunk in client.completions.create(model=models[0], prompt=prompt, max_tokens=n,
                                           stream=True):
        c = chunk.choices[0]
        pieces.append(c.text)
        print(f"  chunk text={c.text!r}" + (f" finish_reason={c.finish_reason}"
                                           if c.finish_reason else ""))
    if "".join(pieces) != whole.choices[0].text or whole.usage.completion_tokens != n:
        fail(f"the streamed text {''.join(pieces)!r} is not the whole one {whole}")
    messages = [{"role": "user", "content": "hello"}]
    print(f"$ client.chat.completions.create(messages={messages}, max_tokens={n}, stream=True)")
    said, last = [], None
    for chunk in client.chat.completions.create(model=models[0], messages=messages, max_tokens=n,
                                                stream=True):
        d = chunk.choices[0].delta
        said.append(d.content or "")
        last = chunk.choices[0].finish_reason or last
        print(f"  delta role={d.role} content={d.content!r}"
              + (f" finish_reason={chunk.choices[0].finish_reason}"
                 if chunk.choices[0].finish_reason else ""))
    if last != "length" or not "".join(said):
        fail(f"the chat stream ended {last!r} with {''.join(said)!r}")
    print("PASS: the openai client: models, completions whole and streamed, chat streamed")


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--make-model":
        sys.path.insert(0, HERE)
        import check_server
        os.makedirs(sys.argv[2], exist_ok=True)
        model, _ = check_server.make_model(sys.argv[2])
        print(model)
        return 0
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    transcript(sys.argv[1].rstrip("/"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
