"""What an IDE or a REPL sees of the package (#26): every public function, method and property has
a docstring and named parameters (inspect.signature's, or for the extension's pybind11 functions
the signature line pybind11 puts first in the docstring); the type stubs (.pyi) declare the same
names with the same parameters as the modules, both ways; py.typed ships next to the package; and
reprs say what a thing is.

The static checks need no session: a plain pytest runs them (the python.api test, which also
starts a job of 1 rank for the reprs of an ended session). The reprs of a live session's objects
run in the suite's in-job and served runs (the `sess` fixture)."""

import ast
import inspect
import os
import re
import subprocess
import sys

import pytest

import disco
import disco.process
import disco.serve
import session_env
from disco import _core

PKG = os.path.dirname(os.path.abspath(disco.__file__))
CLASSES = [disco.Session, disco.DRef, disco.DPackedFunc, disco.Graph, disco.Tensor, disco.Device,
           disco.WorkerInfo, disco.Tokenizer, _core.ServeOptions]
EXCEPTIONS = [disco.RemoteError, disco.ProtocolError, disco.InternalError]
# Special methods that are API (the stubs declare them) when a class of disco defines them.
API_DUNDERS = {"__init__", "__call__", "__enter__", "__exit__", "__dlpack__", "__dlpack_device__",
               "__eq__", "__hash__"}


# ---- The stubs ---------------------------------------------------------------------------------

class Stub:
    """The top-level declarations of one .pyi file: functions (a list: overloads), classes,
    annotated names, and names re-exported from ._core."""

    def __init__(self, name):
        path = os.path.join(PKG, name)
        with open(path) as f:
            self.tree = ast.parse(f.read(), path)
        self.funcs, self.classes, self.names, self.reexports = {}, {}, set(), {}
        self.all = None  # its __all__
        self.sources = {}  # re-exported name: the module it comes from
        for node in self.tree.body:
            if isinstance(node, ast.FunctionDef):
                self.funcs.setdefault(node.name, []).append(node)
            elif isinstance(node, ast.ClassDef):
                self.classes[node.name] = node
            elif isinstance(node, ast.AnnAssign):
                self.names.add(node.target.id)
            elif isinstance(node, ast.Assign):
                self.names.update(t.id for t in node.targets if isinstance(t, ast.Name))
                if any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
                    self.all = ast.literal_eval(node.value)
            elif (isinstance(node, ast.ImportFrom) and node.level == 1
                  and node.module in ("_core", "process") and name == "__init__.pyi"):
                for alias in node.names:
                    # `from ._core import X as X` is the stub idiom for a re-export.
                    assert alias.asname == alias.name, "%s: %s as itself" % (name, alias.name)
                    self.reexports[alias.name] = alias.name
                    self.sources[alias.name] = "disco." + node.module

    def public(self):
        return {n for n in set(self.funcs) | set(self.classes) | self.names | set(self.reexports)
                if not n.startswith("_")}


STUBS = {"disco": Stub("__init__.pyi"), "disco._core": Stub("_core.pyi"),
         "disco.serve": Stub("serve.pyi"), "disco.process": Stub("process.pyi")}
MODULES = [disco, _core, disco.serve, disco.process]


def stub_class(name):
    for stub in (STUBS["disco._core"], STUBS["disco.process"]):
        if name in stub.classes:
            return stub.classes[name]
    raise KeyError(name)


def is_property(node):
    return any(isinstance(d, ast.Name) and d.id == "property" for d in node.decorator_list)


def stub_members(cls_node):
    """{name: FunctionDef list or "attribute"} of a stub class, with its bases' (in _core.pyi)."""
    members = {}
    for base in cls_node.bases:
        if isinstance(base, ast.Name) and base.id in STUBS["disco._core"].classes:
            members.update(stub_members(stub_class(base.id)))
    own = set()  # names this class declares: they replace its bases' (overloads add up)
    for node in cls_node.body:
        if isinstance(node, ast.FunctionDef):
            if node.name not in own:
                members[node.name] = []
                own.add(node.name)
            members[node.name].append(node)
        elif isinstance(node, ast.AnnAssign):
            members[node.target.id] = "attribute"
    return members


# ---- Parameters, both sides --------------------------------------------------------------------

def _literal(node):
    try:
        return ast.literal_eval(node)
    except ValueError:
        return Ellipsis


def stub_params(fn):
    """The parameters of a stub function: [(name, default)], names starred for *args/**kwargs,
    "*" for the start of keyword-only ones; default is `inspect.Parameter.empty` when none."""
    a = fn.args
    positional = a.posonlyargs + a.args
    defaults = [inspect.Parameter.empty] * (len(positional) - len(a.defaults)) + [
        _literal(d) for d in a.defaults]
    out = [(p.arg, d) for p, d in zip(positional, defaults)]
    if a.vararg:
        out.append(("*" + a.vararg.arg, inspect.Parameter.empty))
    elif a.kwonlyargs:
        out.append(("*", inspect.Parameter.empty))
    out += [(p.arg, inspect.Parameter.empty if d is None else _literal(d))
            for p, d in zip(a.kwonlyargs, a.kw_defaults)]
    if a.kwarg:
        out.append(("**" + a.kwarg.arg, inspect.Parameter.empty))
    return out


# pybind11 (2.10) gives its functions no __text_signature__, and it has no public way to add one:
# the binding used to rewrite the docstrings in pybind11's private function records, and no longer
# does. inspect.signature then raises ValueError for them; their parameters are read from the
# signature line pybind11 writes first in every docstring, "name(self: T, a: int = 0, *args) -> R"
# (the names of the py::arg()s and the reprs of their defaults; a property accessor's line has no
# name, and its self is "arg0").
PYBIND11_LINE = re.compile(r"^(?P<name>\w*)\((?P<params>.*)\)( -> .*)?$")


def split_top_level(text):
    """`text` split at the commas outside brackets and quotes."""
    parts, depth, quote, start = [], 0, None, 0
    for i, c in enumerate(text):
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    if text.strip():
        parts.append(text[start:].strip())
    return parts


def pybind11_params(obj):
    """[(name, default)] from the first line of a pybind11 function's docstring, as
    runtime_params gives them; the first one (self) dropped for a bound method."""
    line = (getattr(obj, "__doc__", None) or "").split("\n")[0]
    m = PYBIND11_LINE.match(line)
    if m is None:
        raise ValueError("no pybind11 signature line in %r" % line)
    out = []
    for p in split_top_level(m.group("params")):
        if p.startswith("*"):
            out.append((p, inspect.Parameter.empty))
            continue
        name, _, default = p.partition(" = ")
        out.append((name.split(":")[0].strip(),
                    inspect.Parameter.empty if not default else _literal(ast.parse(
                        default, mode="eval").body)))
    if not m.group("name") and out and out[0][0] == "arg0":
        out[0] = ("self", out[0][1])
    return out[1:] if inspect.ismethod(obj) else out


def runtime_params(obj):
    try:
        sig = inspect.signature(obj)
    except ValueError:
        return pybind11_params(obj)
    out, star = [], False
    for p in sig.parameters.values():
        if p.kind is p.VAR_POSITIONAL:
            out.append(("*" + p.name, p.empty))
            star = True
            continue
        if p.kind is p.KEYWORD_ONLY and not star:
            out.append(("*", p.empty))
            star = True
        out.append(("**" + p.name if p.kind is p.VAR_KEYWORD else p.name, p.default))
    return out


def show(params):
    return "(%s)" % ", ".join(n if d is inspect.Parameter.empty else "%s=%r" % (n, d)
                              for n, d in params)


def check_params(where, obj, stub_fns):
    """The runtime callable `obj` has the parameter names of every stub overload, and the
    defaults of a single declaration (a stub default of ... matches any)."""
    try:
        runtime = runtime_params(obj)
    except (ValueError, TypeError) as e:
        pytest.fail("%s: inspect.signature fails: %s" % (where, e))
    for fn in stub_fns:
        declared = stub_params(fn)
        assert [n for n, _ in runtime] == [n for n, _ in declared], (
            "%s: the stub's parameters %s, the module's %s"
            % (where, show(declared), show(runtime)))
        if len(stub_fns) == 1:
            for (name, have), (_, want) in zip(runtime, declared):
                if want is not Ellipsis:
                    assert (have is inspect.Parameter.empty) == (want is inspect.Parameter.empty) \
                        and (want is inspect.Parameter.empty or have == want), (
                            "%s: parameter %s defaults to %r, the stub says %r"
                            % (where, name, have, want))


# ---- Docstrings --------------------------------------------------------------------------------

def doc_text(obj, name):
    """The docstring without pybind11's signature line ("name(self: T, ...) -> R")."""
    doc = inspect.getdoc(obj) or ""
    lines = doc.split("\n")
    if lines and re.match(r"^%s\(.*\)( -> .*)?$" % re.escape(name), lines[0]):
        lines = lines[1:]
    return "\n".join(lines).strip()


def check_doc(where, obj, name):
    assert doc_text(obj, name), "%s has no docstring" % where


# ---- The module level --------------------------------------------------------------------------

def runtime_public(module):
    names = set()
    for n, v in vars(module).items():
        if n.startswith("_") or inspect.ismodule(v):
            continue
        if (module in (disco.serve, disco.process)
                and getattr(v, "__module__", None) != module.__name__):
            continue  # imported into the module, not its own
        names.add(n)
    return names


def test_all_is_the_public_surface_of_the_package():
    assert set(disco.__all__) == runtime_public(disco)
    assert len(disco.__all__) == len(set(disco.__all__))
    assert disco.__doc__ and disco.serve.__doc__


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_the_stubs_declare_what_the_module_has_both_ways(module):
    stub = STUBS[module.__name__]
    have, declared = runtime_public(module), stub.public()
    assert not have - declared, "%s: missing from the stubs" % sorted(have - declared)
    assert not declared - have, "%s: in the stubs only" % sorted(declared - have)
    # The private functions the stubs declare exist too.
    for name in stub.funcs:
        assert hasattr(module, name), "%s.%s is in the stubs only" % (module.__name__, name)


def test_the_package_stub_declares_all_and_version():
    stub = STUBS["disco"]
    assert {"__all__", "__version__"} <= stub.names
    assert stub.all == disco.__all__
    assert isinstance(disco.__version__, str) and disco.__version__


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_every_function_has_a_docstring_and_the_stubs_parameters(module):
    stub = STUBS[module.__name__]
    for name in sorted(runtime_public(module)):
        obj = getattr(module, name)
        where = "%s.%s" % (module.__name__, name)
        if inspect.isclass(obj):
            continue  # test_every_class_...
        assert callable(obj), where
        check_doc(where, obj, name)
        if name in stub.reexports:
            fns = STUBS["disco._core"].funcs[stub.reexports[name]]
        else:
            fns = stub.funcs.get(name)
        assert fns, "%s is not a function in the stubs" % where
        check_params(where, obj, fns)


def test_every_class_of_the_stubs_is_a_class_of_the_module():
    core = STUBS["disco._core"]
    assert set(core.classes) == {c.__name__ for c in CLASSES + EXCEPTIONS}
    for name in disco.__all__:
        obj = getattr(disco, name)
        if inspect.isclass(obj):
            stub = STUBS["disco"]
            assert name in stub.reexports, name
            assert obj is getattr(sys.modules[stub.sources[name]], name), name
    for exc in EXCEPTIONS:
        assert issubclass(exc, RuntimeError) and exc.__doc__, exc
        assert [b.id for b in core.classes[exc.__name__].bases] == ["RuntimeError"]


# ---- Classes -----------------------------------------------------------------------------------

def runtime_members(cls):
    """{name: the raw attribute} of `cls`: its public names and the API special methods that disco
    defines (not object's or pybind11's, and not slot wrappers)."""
    out = {}
    for name in dir(cls):
        raw = inspect.getattr_static(cls, name)
        if not name.startswith("_"):
            out[name] = raw
        elif name in API_DUNDERS:
            owner = next(c for c in cls.__mro__ if name in vars(c))
            if (owner.__module__ in ("disco._core", "disco.process")
                    and type(raw).__name__ != "wrapper_descriptor"):
                out[name] = raw
    return out


@pytest.mark.parametrize("cls", CLASSES + [disco.ProcessSession], ids=lambda c: c.__name__)
def test_every_class_member_has_a_docstring_and_the_stubs_parameters(cls):
    assert cls.__doc__ and cls.__doc__.strip(), cls
    have = runtime_members(cls)
    declared = stub_members(stub_class(cls.__name__))
    assert not set(have) - set(declared), (
        "%s: %s missing from the stubs" % (cls.__name__, sorted(set(have) - set(declared))))
    assert not set(declared) - set(have), (
        "%s: %s in the stubs only" % (cls.__name__, sorted(set(declared) - set(have))))
    for name, raw in sorted(have.items()):
        where = "%s.%s" % (cls.__name__, name)
        stub = declared[name]
        if isinstance(raw, property):
            assert raw.__doc__ and raw.__doc__.strip(), "%s has no docstring" % where
            if raw.fset is None:
                assert stub != "attribute" and len(stub) == 1 and is_property(stub[0]), (
                    "%s is read-only: a @property in the stubs" % where)
                check_params(where, raw.fget, stub)
            else:
                assert stub == "attribute", "%s is writable: an attribute in the stubs" % where
            continue
        assert stub != "attribute" and not any(is_property(f) for f in stub), (
            "%s is a method, the stubs declare a property" % where)
        obj = getattr(cls, name)
        check_doc(where, obj, name)
        check_params(where, obj, stub)
        is_static = isinstance(raw, staticmethod)
        static_in_stub = any(isinstance(d, ast.Name) and d.id == "staticmethod"
                             for f in stub for d in f.decorator_list)
        assert is_static == static_in_stub, "%s: static in one of the module and stubs" % where


def test_methods_of_objects_have_parameters_without_self():
    t = disco.Tensor.empty((2, 3), "float32")
    assert runtime_params(t.numpy) == []
    assert [n for n, _ in runtime_params(t.__dlpack__)] == ["stream"]
    d = disco.cpu()
    assert [n for n, _ in runtime_params(d.__eq__)] == ["other"]
    assert show(runtime_params(disco.Device.__init__)) == "(self, device_type, device_id=0)"
    assert show(runtime_params(disco.Session.empty)) == (
        "(self, shape, dtype, device=None, worker0_only=False, in_group=True)")
    assert show(runtime_params(disco.Session.init_ccl)) == "(self, ccl, *args)"
    # The two raw CPython methods (python/src/fastcall.cc) carry text signatures of their own.
    assert str(inspect.signature(disco.Graph.replay)) == "(self, /, *inputs)"
    assert str(inspect.signature(disco.DPackedFunc.__call__)) == "(self, /, *args)"


def test_docstrings_are_pybind11s_own():
    # The binding leaves pybind11's docstrings as pybind11 made them (their first line the typed
    # signature): it adds no __text_signature__, which only pybind11's private function records
    # could carry (see PYBIND11_LINE above).
    assert disco.Session.empty.__doc__.startswith("empty(self: disco._core.Session, shape: object")
    assert disco.Session.empty.__text_signature__ is None
    assert disco.Session.capture.__doc__.startswith(
        "capture(self: disco._core.Session, num_inputs: int = 0) -> disco._core.Graph\n")
    assert disco.Graph.replay.__doc__.startswith("replay(*inputs): runs the recorded calls")


def test_py_typed_is_next_to_the_package():
    assert os.path.isfile(os.path.join(PKG, "py.typed"))
    for stub in ("__init__.pyi", "_core.pyi", "serve.pyi", "process.pyi"):
        assert os.path.isfile(os.path.join(PKG, stub)), stub


# ---- Reprs without a session -------------------------------------------------------------------

def test_reprs_of_values():
    assert repr(disco.cpu()) == "disco.Device('cpu')"
    assert repr(disco.cuda(1)) == "disco.Device('cuda:1')"
    assert str(disco.cuda(1)) == "cuda:1"
    t = disco.Tensor.empty((2, 3), "float32")
    assert repr(t) == "disco.Tensor(shape=(2, 3), dtype=float32, device=cpu)"
    o = _core.ServeOptions()
    assert repr(o).startswith("disco._core.ServeOptions(host='127.0.0.1', port=0, key='', ")
    o.key = "a-secret-key-of-the-server"
    assert o.key not in repr(o) and "key=<set>" in repr(o)


# ---- Reprs of a live session's objects ---------------------------------------------------------

def test_reprs_of_a_session_and_its_objects(sess):
    n, groups = sess.num_workers, sess.num_groups
    where = "in_job"
    if session_env.MODE == "remote":
        where = "remote " + os.environ.get("DISCO_TEST_SERVER", "")
    if session_env.MODE == "process":
        assert repr(sess) == "disco.ProcessSession(num_workers=%d, num_groups=%d, job pid %d)" % (
            n, groups, sess._proc.pid)
    else:
        assert repr(sess) == "disco.Session(num_workers=%d, num_groups=%d, %s)" % (n, groups,
                                                                                  where)
    f = sess.get_global_func("test.py.scale")
    assert f.name == "test.py.scale"
    assert repr(f) == "disco.DPackedFunc('test.py.scale', reg=%d)" % f.reg_id
    x = sess.empty((4,), "float32")
    assert repr(x) == "disco.DRef(reg=%d)" % x.reg_id
    assert repr(f(x, 2.0)).startswith("disco.DRef(reg=")
    g = sess.capture(num_inputs=1)
    assert repr(g) == "disco.Graph(not captured, num_inputs=1)"
    with g:
        assert repr(g) == "disco.Graph(capturing, num_inputs=1)"
        f(x, g.inputs[0])
    assert repr(g) == "disco.Graph(id=%d, num_inputs=1, num_calls=1)" % g.id
    sess.sync_all()


def test_live_objects_have_signatures(sess):
    assert show(runtime_params(sess.empty)) == (
        "(shape, dtype, device=None, worker0_only=False, in_group=True)")
    f = sess.get_global_func("test.py.scale")
    assert str(inspect.signature(f)) == "(*args)"
    assert str(inspect.signature(f.__call__)) == "(*args)"
    # The descriptor calls what f(...) calls.
    assert f.__call__(2.0, 3.0).debug_get_from_remote(0) == f(2.0, 3.0).debug_get_from_remote(0)
    assert f.__call__(2.0, 3.0).debug_get_from_remote(0) == 6.0


def test_worker_info_repr_on_every_worker(sess):
    r = sess.get_global_func("test.py.worker_repr")()
    n, groups = sess.num_workers, sess.num_groups
    for w in range(n):
        assert re.fullmatch(
            r"disco\.WorkerInfo\(worker_id=%d, num_workers=%d, group_id=%d, num_groups=%d, "
            r"local_rank=\d+, local_size=\d+, device='[a-z]+(:\d+)?'\)"
            % (w, n, w // (n // groups), groups),
            r.debug_get_from_remote(w)), r.debug_get_from_remote(w)


# ---- Reprs of an ended session (a job of its own) ----------------------------------------------

ENDED_APP = """
import disco
kept = []
def controller(sess):
    kept.append(sess)
    print("live:", repr(sess))
    sess.shutdown()
    print("shut down:", repr(sess))
    return 0
code = disco.main(controller)
print("after main:", repr(kept[0]))
"""


@pytest.mark.skipif(session_env.SESSION is not None,
                    reason="starts a job of its own: run by a plain pytest")
def test_repr_of_an_ended_session():
    import test_jobs  # its launcher (DISCO_TEST_MPIEXEC) and job environment
    p = subprocess.run(test_jobs.MPIEXEC + ["1", sys.executable, "-c", ENDED_APP],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=test_jobs.job_env(),
                       timeout=90, check=False)
    out = p.stdout.decode(errors="replace")
    assert p.returncode == 0, out
    assert "live: disco.Session(num_workers=1, num_groups=1, in_job)" in out, out
    assert "shut down: disco.Session(ended)" in out, out
    assert "after main: disco.Session(ended)" in out, out
