#!/usr/bin/env python3
"""Tests of tests/docs/check_docs.py: a made-up checkout with one of each problem, each reported
at its line, and nothing else; then the same checkout fixed, which passes.

    python3 tests/docs/check_docs_test.py
"""
import os
import subprocess
import sys
import tempfile

CHECKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "check_docs.py")

README = """# project

```bash
./launch/demo --which-mpi         # an option launch/demo has
./launch/missing-script           # (1) no such script
launch/disco-run -n 2 --bogus-opt -- build/src/foo   # (2) unknown option
build/src/nothere --flag          # (3) no such target
build/src/bar-out                 # an OUTPUT_NAME
build/python                      # a directory of the checkout
tests/nothere.sh                  # (4) no such file
PYTHONPATH=build/whatever python3 examples/run.py
```

Links: [ok](docs/a.md), [ok](docs/a.md#pitfalls-1), [ok](#local-heading),
[ok](docs/a.md#the-mlp-demo-disco-demo---mlp), [ok](https://example.com/x#y),
[broken](docs/missing.md), [anchor](docs/a.md#nope), [local](#bad-local),
![image](docs/img.png), `[in code](nowhere.md)`.

## Local heading
"""

A_MD = """# A page

## The MLP demo (`disco-demo --mlp`)

## Pitfalls

## Pitfalls

Back: [ok](../README.md#local-heading), [ok](#pitfalls), [ok](a.md#pitfalls-1),
[bad](../README.md#nope), [ok](../launch/disco-run).

```bash
disco-run --which-mpi -n 2 -- build/src/foo --not-an-option-of-disco-run
```

```python
[not a link](nowhere.md)
```
"""

# The outside files the fixtures cite, spelled in parts so that this file itself cites none.
DESIGN = "DESIGN" + ".md"
SHARED = "../" + "shared/"
FINDINGS = "shared" + "/findings"

FILES = {
    "launch/disco-run": "#!/bin/sh\n# disco-run [-n N] [--which-mpi] -- program\n",
    "launch/demo": "#!/bin/sh\n# --which-mpi\n",
    "CMakeLists.txt": "add_executable(foo foo.cc)\n"
                      "set_target_properties(bar PROPERTIES OUTPUT_NAME bar-out)\n",
    "python/CMakeLists.txt": "",
    "examples/run.py": "",
    "docs/a.md": A_MD,
    # (e) Markdown files outside docs/: links and anchors.
    "tests/README.md": "# Tests\n\n[ok](../docs/a.md#pitfalls), [ok](../README.md)\n"
                       "[broken](unit/missing.md), [anchor](../docs/a.md#nope)\n",
    # (f) references to files outside the repository, in any text file.
    "src/x.cc": "// The builtins (docs/a.md#pitfalls, docs/a.md).\n"
                f"// The builtins ({DESIGN}, section 2).\n"
                "// (g) See docs/gone.md and docs/a.md#gone; ../docs/a.md is (a)'s.\n",
    "tests/slurm/start.sh": f"#!/bin/sh\n# a copy of the recipe in {SHARED}slurm/\n",
    "notes.txt": f"design.md is fine\nsee {FINDINGS}/F1.md\n",
    "data.bin": f"\0binary {DESIGN} {SHARED}\n",
}
FIXES = {  # what the fixed checkout writes instead
    "tests/README.md": ("unit/missing.md", "../docs/a.md", "#nope", "#pitfalls"),
    "src/x.cc": (f"{DESIGN}, section 2", "docs/a.md", "docs/gone.md", "docs/a.md",
                 "docs/a.md#gone", "docs/a.md#pitfalls"),
    "tests/slurm/start.sh": (f"{SHARED}slurm/", "tests/slurm/"),
    "notes.txt": (f"{FINDINGS}/F1.md", "docs/a.md"),
}

EXPECTED = [  # (file, line, text the problem must contain)
    ("README.md", 5, "missing file: ./launch/missing-script"),
    ("README.md", 6, "option --bogus-opt does not appear in launch/disco-run"),
    ("README.md", 7, "build/src/nothere"),
    ("README.md", 10, "missing file: tests/nothere.sh"),
    ("README.md", 16, "broken link: docs/missing.md"),
    ("README.md", 16, "bad anchor: docs/a.md#nope"),
    ("README.md", 16, "bad anchor: #bad-local"),
    ("README.md", 17, "broken link: docs/img.png"),
    ("docs/a.md", 10, "bad anchor: ../README.md#nope"),
    ("tests/README.md", 4, "broken link: unit/missing.md"),
    ("tests/README.md", 4, "bad anchor: ../docs/a.md#nope"),
    ("src/x.cc", 2, f"refers to {DESIGN}, a file outside the repository"),
    ("src/x.cc", 3, "names docs/gone.md, which does not exist"),
    ("src/x.cc", 3, "names docs/a.md#gone, but docs/a.md has no such heading"),
    ("tests/slurm/start.sh", 2, f"refers to {SHARED}, a file outside the repository"),
    ("notes.txt", 2, f"refers to {FINDINGS}, a file outside the repository"),
]


def make(root, readme, files=FILES):
    for name, text in list(files.items()) + [("README.md", readme)]:
        path = os.path.join(root, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)


def check(root):
    r = subprocess.run([sys.executable, CHECKER, root], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True)
    return r.returncode, r.stdout.splitlines(), r.stderr


def main():
    failures = []
    with tempfile.TemporaryDirectory() as root:
        long_readme = README + "\nfiller\n" * 130  # 20 + 260 lines
        make(root, long_readme)
        rc, lines, err = check(root)
        if rc != 1:
            failures.append("exit code %d, not 1" % rc)
        expected = EXPECTED + [("README.md", long_readme.count("\n"), "more than 250")]
        unmatched = list(lines)
        for name, line, text in expected:
            prefix = "%s:%d: " % (name, line)
            hits = [l for l in unmatched if l.startswith(prefix) and text in l]
            if not hits:
                failures.append("not reported: %s%s" % (prefix, text))
            else:
                unmatched.remove(hits[0])
        failures += ["reported but not expected: %s" % l for l in unmatched]

        # The same checkout with the problems fixed passes.
        fixed = README
        for bad, good in [("./launch/missing-script", "./launch/demo"),
                          ("--bogus-opt ", ""), ("build/src/nothere", "build/src/foo"),
                          ("tests/nothere.sh", "examples/run.py"),
                          ("docs/missing.md", "docs/a.md"), ("docs/a.md#nope", "docs/a.md"),
                          ("#bad-local", "#local-heading"), ("docs/img.png", "docs/a.md")]:
            fixed = fixed.replace(bad, good)
        fixed_files = dict(FILES)
        for name, pairs in FIXES.items():
            for bad, good in zip(pairs[::2], pairs[1::2]):
                fixed_files[name] = fixed_files[name].replace(bad, good)
        make(root, fixed, fixed_files)
        with open(os.path.join(root, "docs/a.md"), "w") as f:
            f.write(A_MD.replace("../README.md#nope", "../README.md"))
        rc, lines, err = check(root)
        if rc != 0 or lines[-1:] == [] or "OK" not in lines[-1]:
            failures.append("the fixed checkout: exit %d, output %r %r" % (rc, lines, err))

    for f in failures:
        print("FAIL:", f)
    if failures:
        return 1
    print("check_docs_test: %d problems reported at their lines, the fixed checkout passes"
          % (len(EXPECTED) + 1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
