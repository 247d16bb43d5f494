"""check_disco.py against fake_disco_demo.py (the contract on the NumPy reference): it passes a
correct demo, fails a wrong one, and skips (77) a demo without --model. Needs mpiexec.

    /usr/bin/python3 -m pytest -q tests/llama/test_check_disco.py
"""

import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
MPIEXEC = shutil.which("mpiexec") or shutil.which("mpirun")
pytestmark = pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec")


@pytest.fixture
def fake(tmp_path):
    path = tmp_path / "disco-demo"
    path.write_text(f'#!/bin/sh\nexec {sys.executable} {HERE}/fake_disco_demo.py "$@"\n')
    path.chmod(0o755)
    return str(path)


def check(fake, *args, env=None, direct=()):
    e = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
             OMPI_MCA_rmaps_base_oversubscribe="1", PYTHON=sys.executable, **(env or {}))
    cmd = [f"{HERE}/run_reference_test.sh", MPIEXEC, fake] + list(args)
    if direct:  # check_disco.py itself, with these options
        cmd = [sys.executable, f"{HERE}/check_disco.py", "--mpiexec", MPIEXEC, "--demo", fake,
               "--np", args[0], "--dtype", args[1]] + list(direct)
    p = subprocess.run(cmd, env=e,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    return p.returncode, p.stdout


def test_passes_a_correct_demo_at_2_ranks(fake):
    rc, out = check(fake, "2", "float32")
    assert rc == 0, out
    assert out.count("ok: ") == 9 and out.rstrip().endswith("PASS"), out


def test_passes_a_correct_demo_in_bfloat16(fake):
    rc, out = check(fake, "1", "bfloat16")
    assert rc == 0, out


@pytest.mark.parametrize("bug,needle", [
    ("position", "not a near tie"),
    ("swap", "prompt 0 token 0"),
])
def test_fails_a_wrong_demo(fake, bug, needle):
    rc, out = check(fake, "2", "float32", env={"FAKE_DISCO_BUG": bug},
                    direct=["--case", "f32-gqa", "--no-errors"])
    assert rc == 1 and needle in out, out


def test_fails_a_demo_that_hangs_on_a_broken_checkpoint(fake):
    rc, out = check(fake, "2", "float32", env={"FAKE_DISCO_BUG": "hang"},
                    direct=["--case", "f32-gqa", "--timeout", "5"])
    assert rc == 1 and "wrong-shape: exit 124 (hang, killed)" in out, out


def test_skips_a_demo_without_model(fake):
    rc, out = check(fake, "2", "float32", env={"FAKE_DISCO_NO_MODEL": "1"})
    assert rc == 77 and "SKIP" in out, out
