"""A checkpoint's chat template, rendered as Hugging Face transformers renders it.

A chat model's directory holds its template in ``chat_template.jinja`` or in
``tokenizer_config.json``'s ``chat_template`` (a string, or a list of named templates of which
``default`` is used). :func:`render` fills it with the messages the way
``tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)`` does: a
sandboxed Jinja2 environment (``trim_blocks``, ``lstrip_blocks``, loop controls), the filters and
functions transformers gives templates (``tojson``, ``raise_exception``, ``strftime_now``) and the
tokenizer's special tokens (``bos_token``, ``eos_token``, ...) as variables. Encode the result
without adding special tokens (the template wrote them).

Every problem is one :class:`ChatTemplateError` naming the file: no template, a template that does
not parse, one that uses what the sandbox refuses or what is not defined, or one that raises.
"""
from __future__ import annotations

import datetime
import json
import os
import stat
import sys
from typing import Any, Dict, List, Optional, Tuple

__all__ = ["ChatTemplateError", "load_template", "render", "serve", "eos_token_ids",
           "read_json_object", "read_text"]

_SPECIAL = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
            "mask_token")


class ChatTemplateError(ValueError):
    """A checkpoint's chat template is missing, malformed or fails on the messages."""


MAX_FILE_BYTES = 16 << 20  # a template or JSON file of a checkpoint: at most this
MAX_RANGE_ITEMS = 1_000_000  # range() items a render may take, all loops together
MAX_REPEAT = 1 << 20  # the longest string or list `*` may make


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split("\n"))


def read_text(path: str) -> str:
    """A checkpoint's text file: a regular file (not a FIFO, a device or a directory, which would
    hang or never end), at most MAX_FILE_BYTES, UTF-8."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise ChatTemplateError(f"{path}: cannot open it: {e.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ChatTemplateError(f"{path}: not a regular file")
        if st.st_size > MAX_FILE_BYTES:
            raise ChatTemplateError(f"{path}: {st.st_size} bytes, more than {MAX_FILE_BYTES}")
        data = f.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise ChatTemplateError(f"{path}: more than {MAX_FILE_BYTES} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ChatTemplateError(f"{path}: not UTF-8 (byte {e.start})") from None


def read_json_object(path: str) -> Dict[str, Any]:
    """A checkpoint's JSON file (config.json, tokenizer_config.json, ...) as a dict."""
    try:
        value = json.loads(read_text(path))
    except RecursionError:
        raise ChatTemplateError(f"{path}: nested too deeply") from None
    except ValueError as e:
        if isinstance(e, ChatTemplateError):
            raise
        raise ChatTemplateError(f"{path}: malformed JSON: {_one_line(e)}") from None
    if not isinstance(value, dict):
        raise ChatTemplateError(f"{path}: not a JSON object")
    return value


def load_template(model_dir: str) -> Tuple[str, str, Dict[str, Any]]:
    """(template, the file it came from, tokenizer_config.json's contents or {})."""
    config_path = os.path.join(model_dir, "tokenizer_config.json")
    config = read_json_object(config_path) if os.path.lexists(config_path) else {}
    jinja_path = os.path.join(model_dir, "chat_template.jinja")
    if os.path.lexists(jinja_path):
        return read_text(jinja_path), jinja_path, config
    template = config.get("chat_template")
    if isinstance(template, list):  # named templates: transformers uses "default"
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
        if template is None:
            raise ChatTemplateError(
                f"{config_path}: chat_template is a list without a 'default' template "
                f"(it has {sorted(str(n) for n in named)})")
    if template is None:
        raise ChatTemplateError(
            f"{model_dir}: the checkpoint has no chat template (looked for chat_template.jinja "
            "and tokenizer_config.json's chat_template)")
    if not isinstance(template, str):
        raise ChatTemplateError(f"{config_path}: chat_template is a {type(template).__name__}, "
                                "not a string")
    return template, config_path, config


def _token_text(value: Any) -> Optional[str]:
    """A special token as tokenizer_config.json gives it: a string or {"content": ...}."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _environment():
    import jinja2  # Debian's python3-jinja2, as transformers uses it
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Limited(ImmutableSandboxedEnvironment):
        """Bounds what a template can make: `*` and `**` of sizes past MAX_REPEAT are refused."""
        intercepted_binops = frozenset({"*", "**"})

        def call_binop(self, context, operator, left, right):
            if operator == "**" and isinstance(right, int) and abs(right) > 64:
                raise jinja2.exceptions.SecurityError(f"an exponent of {right}")
            if operator == "*":
                for a, b in ((left, right), (right, left)):
                    if isinstance(a, (str, list, tuple)) and isinstance(b, int) and \
                            len(a) * b > MAX_REPEAT:
                        raise jinja2.exceptions.SecurityError(
                            f"a sequence of {len(a) * b} items (at most {MAX_REPEAT})")
            return super().call_binop(context, operator, left, right)

    class Generation(jinja2.ext.Extension):
        """transformers' {% generation %} ... {% endgeneration %}: the text between, as is."""
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(
                lineno)

        def _render(self, caller):
            return caller()

    taken = [0]

    def bounded_range(*args):
        r = range(*args)
        taken[0] += len(r)
        if taken[0] > MAX_RANGE_ITEMS:
            raise jinja2.exceptions.SecurityError(
                f"loops over more than {MAX_RANGE_ITEMS} range() items")
        return r

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):  # noqa: A002  (the name templates call it by)
        return datetime.datetime.now().strftime(format)

    env = Limited(trim_blocks=True, lstrip_blocks=True,
                  extensions=[jinja2.ext.loopcontrols, Generation])
    env.filters["tojson"] = tojson
    env.globals["range"] = bounded_range
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(model_dir: str, messages: List[Dict[str, Any]],
           add_generation_prompt: bool = True) -> str:
    """The prompt text of `messages` ([{"role": ..., "content": ...}, ...]) for the checkpoint."""
    import jinja2

    template, path, config = load_template(model_dir)
    env = _environment()
    variables = {name: _token_text(config.get(name)) for name in _SPECIAL}
    variables = {k: v for k, v in variables.items() if v is not None}
    try:
        compiled = env.from_string(template)
    except RecursionError:
        raise ChatTemplateError(f"{path}: the chat template is nested too deeply") from None
    except jinja2.TemplateSyntaxError as e:
        raise ChatTemplateError(f"{path}: the chat template does not parse: line {e.lineno}: "
                                f"{' '.join(str(e.message).splitlines())}") from None
    try:
        # tools and documents as transformers passes them when a caller gives none
        return compiled.render(messages=messages, tools=None, documents=None,
                               add_generation_prompt=add_generation_prompt, **variables)
    except jinja2.exceptions.SecurityError as e:
        raise ChatTemplateError(f"{path}: the chat template does what the sandbox refuses: "
                                f"{_one_line(e)}") from None
    except jinja2.TemplateError as e:  # raise_exception, undefined names, bad filters
        raise ChatTemplateError(f"{path}: the chat template failed: "
                                f"{type(e).__name__}: {_one_line(e)}") from None
    except Exception as e:  # noqa: BLE001  (ZeroDivisionError, RecursionError, MemoryError...)
        raise ChatTemplateError(f"{path}: the chat template failed: "
                                f"{type(e).__name__}: {_one_line(e)}") from None


def eos_token_ids(model_dir: str) -> List[int]:
    """The ids that end an answer: generation_config.json's eos_token_id, else config.json's."""
    for name in ("generation_config.json", "config.json"):
        path = os.path.join(model_dir, name)
        if not os.path.lexists(path):
            continue
        value = read_json_object(path).get("eos_token_id")
        if value is None:
            continue
        values = value if isinstance(value, list) else [value]
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
            raise ChatTemplateError(f"{path}: eos_token_id {value!r} is not a token id or a "
                                    "list of them")
        return list(values)
    return []


RENDERER_MEMORY = 4 << 30  # bytes of address space a render server may use


def _limit_self() -> None:
    """A render server ends with the server that started it (Linux's parent-death signal: a
    template still rendering when the server is killed does not run on), and a template that
    grows without bound meets MemoryError (an error answered for that request), not the node's
    memory."""
    try:
        import ctypes
        import resource
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGKILL
        if os.getppid() == 1:  # the server was gone before the line above
            sys.exit(0)
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        cap = RENDERER_MEMORY if hard == resource.RLIM_INFINITY else min(hard, RENDERER_MEMORY)
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    except (OSError, ValueError, AttributeError):
        pass


def serve(model_dir: str, stdin=None, stdout=None) -> int:
    """The render loop of disco-llm-server, which runs ``python3 chat.py --serve DIR`` as a child
    (the chat template is Jinja2, so it is rendered by Jinja2 itself, in the sandbox above).

    Protocol, one JSON object per line: first this side says ``{"ready": true, "template": FILE}``
    (or ``"template": null`` and ``"error"`` when the checkpoint has none, or ``"ready": false``
    when Jinja2 is missing); then for each ``{"messages": [...]}`` read it answers
    ``{"prompt": TEXT}`` or ``{"error": MESSAGE}``. It ends when its input ends."""
    stdin = stdin if stdin is not None else sys.stdin
    stdout = stdout if stdout is not None else sys.stdout

    def say(obj: Dict[str, Any]) -> None:
        stdout.write(json.dumps(obj, ensure_ascii=True) + "\n")
        stdout.flush()

    _limit_self()
    try:
        import jinja2  # noqa: F401  (render needs it: say so once, at start)
    except ImportError:
        say({"ready": False, "error": "Jinja2 is not installed for " + sys.executable +
             " (Debian: python3-jinja2)"})
        return 1
    try:
        say({"ready": True, "template": load_template(model_dir)[1]})
    except ChatTemplateError as e:
        say({"ready": True, "template": None, "error": str(e)})
    for line in stdin:
        try:
            request = json.loads(line)
            say({"prompt": render(model_dir, request["messages"])})
        except ChatTemplateError as e:
            say({"error": str(e)})
        except Exception as e:  # noqa: BLE001  (a malformed line: the server's bug, said as such)
            say({"error": f"the chat renderer failed: {type(e).__name__}: {_one_line(e)}"})
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "--serve":
        sys.stderr.write("usage: chat.py --serve MODEL_DIR\n")
        sys.exit(2)
    sys.exit(serve(sys.argv[2]))
