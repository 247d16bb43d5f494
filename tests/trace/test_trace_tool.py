"""python3 -m disco.trace on files made here (no job): what it reads and what it refuses.

- Rank files TRACE.json.rank<r>.json found beside a named trace are read only when they are
  regular files of this uid: another uid's (as root: uid 65534), a symbolic link and a FIFO are
  skipped with a note, never read or waited on; every file read is named, with its owner.
- Numbers a trace cannot hold (1e400, 400-digit integers, beyond int64's range) are refused by
  --check and by the summary alike; every error is one `disco.trace:` line, exit 1, no traceback.
- --max-mib bounds what is read.

Runs with PYTHONPATH holding the built disco package (tests/CMakeLists.txt: trace.tool).
"""

import json
import os
import subprocess
import sys

import pytest


def trace_events(name="mine", dur=5.0, ts=10.0, extra=None):
    events = [
        {"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "rank 0"}},
        {"name": name, "cat": "run", "ph": "X", "pid": 0, "tid": 1, "ts": ts, "dur": dur,
         "args": {"seq": 1}},
    ]
    return {"traceEvents": events, **(extra or {})}


def write(path, data):
    with open(path, "w") as f:
        f.write(data if isinstance(data, str) else json.dumps(data))
    return str(path)


def run(*args):
    r = subprocess.run([sys.executable, "-m", "disco.trace", *map(str, args)],
                       capture_output=True, text=True, stdin=subprocess.DEVNULL)
    return r.returncode, r.stdout, r.stderr


def assert_one_error_line(code, out, err, needle):
    assert code == 1, (code, out, err)
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("disco.trace: "), err
    assert needle in lines[0], err


def test_a_trace_is_read_and_the_file_and_its_owner_named(tmp_path):
    path = write(tmp_path / "t.json", trace_events())
    code, out, err = run("--check", path)
    assert code == 0, err
    assert f"note: read {path} (" in out and "bytes, yours)" in out, out
    code, out, err = run(path)
    assert code == 0 and "mine" in out, (out, err)


@pytest.mark.parametrize("text", [
    '"dur": 1e400', '"dur": -1e400', '"ts": 1e300', '"dur": ' + "9" * 400, '"ts": ' + "1" * 400,
    '"ts": 9223372036854775808', '"dur": 5, "args": {"bytes": 1e400}'])
def test_numbers_out_of_range_are_one_error_line(tmp_path, text):
    # Found by outside testing: "dur": 1e400 passed --check (read as inf) and the summary printed
    # nan% and inf ms; a 400-digit integer passed --check and the summary died in OverflowError.
    body = ('{"traceEvents": [{"name": "f", "cat": "run", "ph": "X", "pid": 0, "tid": 1, '
            '"ts": 1, "dur": 1, ' + text + '}]}')
    path = write(tmp_path / "t.json", body)
    for args in (["--check", path], [path]):
        code, out, err = run(*args)
        assert_one_error_line(code, out, err, "out of range")
        assert "nan" not in out and "inf" not in out, out


def test_the_largest_numbers_disco_writes_are_read(tmp_path):
    path = write(tmp_path / "t.json", trace_events(ts=9223372036854775807 // 2, dur=1e15))
    code, out, err = run(path)
    assert code == 0 and "nan" not in out and "inf" not in out, (out, err)


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to make a file of another uid")
def test_rank_files_of_another_uid_are_skipped(tmp_path):
    # Found by outside testing: another uid planted TRACE.json.rank0.json, newer than TRACE.json,
    # in a shared directory, and the summary was the planted one.
    os.chmod(tmp_path, 0o1777)
    mine = write(tmp_path / "t.json", trace_events("mine"))
    os.utime(mine, (1, 1))  # older than the planted file
    theirs = write(tmp_path / "t.json.rank0.json", trace_events("planted"))
    os.chown(theirs, 65534, 65534)
    code, out, err = run(mine)
    assert code == 0, err
    assert f"skipped {theirs}: owned by uid 65534, not a file of yours" in out, out
    assert "mine" in out and "planted" not in out, out
    # Without the named file, only the planted one: nothing of yours to read.
    os.unlink(mine)
    code, out, err = run(mine)
    assert_one_error_line(code, out, err, "of yours beside it")


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to make a file of another uid")
def test_a_named_file_of_another_uid_is_read_and_its_owner_said(tmp_path):
    theirs = write(tmp_path / "given.json", trace_events("given"))
    os.chown(theirs, 65534, 65534)
    code, out, err = run(theirs)
    assert code == 0 and "given" in out, err
    assert "uid 65534's, not yours" in out, out


def test_rank_files_that_are_links_or_fifos_are_skipped_without_blocking(tmp_path):
    base = str(tmp_path / "t.json")
    target = write(tmp_path / "elsewhere.json", trace_events("linked"))
    os.symlink(target, base + ".rank0.json")
    os.mkfifo(base + ".rank1.json")  # no writer comes: an open that blocks would hang here
    write(base + ".rank2.json", trace_events("rank two"))
    code, out, err = run(base)
    assert code == 0, err
    assert f"skipped {base}.rank0.json: a symbolic link" in out, out
    assert f"skipped {base}.rank1.json: not a regular file" in out, out
    assert "rank two" in out and "linked" not in out, out
    # Named, a FIFO is refused at once too.
    code, out, err = run(base + ".rank1.json")
    assert_one_error_line(code, out, err, "not a regular file")


def test_files_over_the_size_bound_are_refused(tmp_path):
    path = write(tmp_path / "big.json", json.dumps(trace_events()) + " " * (2 << 20))
    code, out, err = run("--max-mib", "1", path)
    assert_one_error_line(code, out, err, "more than --max-mib 1 MiB")
    code, out, err = run("--max-mib", "3", "--check", path)
    assert code == 0, err


def test_odd_but_readable_files_are_no_traceback(tmp_path):
    path = write(tmp_path / "t.json", trace_events("\ud800 lone", extra={"otherData": [1]}))
    code, out, err = run(path)
    assert code == 0 and "Traceback" not in err, err
